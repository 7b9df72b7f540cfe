-- One board group's atomic write (sinks/boards/encoding.py builds the arguments).
-- KEYS[1] watermark hash, KEYS[2] stats hash, KEYS[3] board registry, KEYS[4..] boards/seen
-- ARGV: field, offset, expected watermark, members per command, then counted sections.
-- Answers {outcome, microseconds Redis spent writing}: outcome 1 applied, 0 applied
-- before, -2 - stored when refused (encoding.refused_at).
-- Fence: the last key is the group's fence, the last argument the writer's epoch
-- (0: not a leased deployment, unchecked). A deposed deployment's epoch is below it.
local epoch = tonumber(ARGV[#ARGV])
if epoch > 0 then
  local fence = tonumber(redis.call('GET', KEYS[#KEYS]) or '0')
  if epoch < fence then return redis.error_reply('FENCED ' .. fence) end
  if epoch > fence then redis.call('SET', KEYS[#KEYS], epoch) end
end
local cur = tonumber(redis.call('HGET', KEYS[1], ARGV[1]) or '-1')
if cur >= tonumber(ARGV[2]) then return {0, 0} end
-- Not what the plan was based on: Redis lost writes (or another writer moved
-- it). Write nothing and say what is stored: the job re-reads from there.
if cur ~= tonumber(ARGV[3]) then return {-2 - cur, 0} end
local t0 = redis.call('TIME')
-- Members per ZADD/ZREM/HSET/SADD call: Lua's unpack takes ~8000 values at most.
local per = tonumber(ARGV[4])
local i = 5
local function take() local v = ARGV[i]; i = i + 1; return v end
local function chunked(cmd, key, first, n, width)
  local at = first
  while at < first + n * width do
    local stop = math.min(at + per * width, first + n * width)
    redis.call(cmd, key, unpack(ARGV, at, stop - 1))
    at = stop
  end
end
for _ = 1, tonumber(take()) do            -- zadd: key index, n, (score member)*
  local k = KEYS[tonumber(take())]; local n = tonumber(take())
  chunked('ZADD', k, i, n, 2); i = i + 2 * n
end
for _ = 1, tonumber(take()) do            -- zrem: key index, n, member*
  local k = KEYS[tonumber(take())]; local n = tonumber(take())
  chunked('ZREM', k, i, n, 1); i = i + n
end
for _ = 1, tonumber(take()) do            -- expireat: key index, unix seconds
  local k = KEYS[tonumber(take())]; redis.call('EXPIREAT', k, take())
end
local nw = tonumber(take())               -- registry: n, window id*
if nw > 0 then chunked('SADD', KEYS[3], i, nw, 1); i = i + nw end
for _ = 1, tonumber(take()) do            -- seen: key index, ttl, n, (id ts)*
  local k = KEYS[tonumber(take())]; local ttl = take(); local n = tonumber(take())
  chunked('HSET', k, i, n, 2); i = i + 2 * n
  redis.call('EXPIRE', k, ttl)
end
for _ = 1, tonumber(take()) do            -- counts: key index, n, (field value)*
  local k = KEYS[tonumber(take())]; local n = tonumber(take())
  chunked('HSET', k, i, n, 2); i = i + 2 * n
end
for _ = 1, tonumber(take()) do            -- stats: name, increment
  local name = take(); local by = tonumber(take())
  if by ~= 0 then redis.call('HINCRBY', KEYS[2], name, by) end
end
if tonumber(take()) > 0 then             -- changes: 1, stream, maxlen, JSON list
  local stream = KEYS[tonumber(take())]; local cap = take()
  redis.call('XADD', stream, 'MAXLEN', '~', cap, '*', 'c', take())
end
if tonumber(take()) > 0 then             -- teams: 1, of, slots, agg, prefix, n, (w s)*, m, (w p v)*
  local of = KEYS[tonumber(take())]; local slots = KEYS[tonumber(take())]
  local agg = take(); local prefix = take()
  for _ = 1, tonumber(take()) do redis.call('HSET', slots, take(), take()) end
  for _ = 1, tonumber(take()) do
    local w = take(); local p = take(); local v = take()
    local team = redis.call('HGET', of, p)
    if team then team_put(prefix, agg, w, team, p, v ~= '' and tonumber(v)) end
  end
end
redis.call('HSET', KEYS[1], ARGV[1], ARGV[2])
local t1 = redis.call('TIME')
return {1, (t1[1] - t0[1]) * 1000000 + (t1[2] - t0[2])}
