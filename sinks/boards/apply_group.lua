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
local zspan, rspan = {}, {}               -- where each board's members are (entry metadata)
for _ = 1, tonumber(take()) do            -- zadd: key index, n, (score member)*
  local k = KEYS[tonumber(take())]; local n = tonumber(take())
  zspan[k] = {i, n}
  chunked('ZADD', k, i, n, 2); i = i + 2 * n
end
for _ = 1, tonumber(take()) do            -- zrem: key index, n, member*
  local k = KEYS[tonumber(take())]; local n = tonumber(take())
  rspan[k] = {i, n}
  chunked('ZREM', k, i, n, 1); i = i + n
end
for _ = 1, tonumber(take()) do            -- expireat: key index, unix seconds
  local k = KEYS[tonumber(take())]; redis.call('EXPIREAT', k, take())
end
local nw = tonumber(take())               -- registry: n, window id*
if nw > 0 then chunked('SADD', KEYS[3], i, nw, 1); i = i + nw end
-- Appends each value to what its field holds: one HMGET and one HSET per chunk.
local function appended(key, first, n)
  local at = first
  while at < first + 2 * n do
    local stop = math.min(at + per * 2, first + 2 * n)
    local fields = {}
    for j = at, stop - 1, 2 do fields[#fields + 1] = ARGV[j] end
    local held = redis.call('HMGET', key, unpack(fields))
    local pairs_ = {}
    for j = 1, #fields do
      pairs_[2 * j - 1] = fields[j]
      pairs_[2 * j] = (held[j] or '') .. ARGV[at + 2 * j - 1]
    end
    redis.call('HSET', key, unpack(pairs_))
    at = stop
  end
end
local nseen = tonumber(take())            -- seen: n, append?, then per key:
local append = take() == '1'              --   key index, ttl, n, (field value)*
for _ = 1, nseen do
  local k = KEYS[tonumber(take())]; local ttl = take(); local n = tonumber(take())
  if append then appended(k, i, n) else chunked('HSET', k, i, n, 2) end
  i = i + 2 * n
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
-- Entry metadata: n boards; per board: board key index, hash key index, expire-at
-- (0: none), n, (member metadata)*, n, member* to clear. When the hash exists, every
-- member this write added or removed loses its old metadata first (an event without
-- metadata set its value); then the listed ones are set.
for _ = 1, tonumber(take()) do
  local b = KEYS[tonumber(take())]; local h = KEYS[tonumber(take())]
  local at = tonumber(take())
  local ns = tonumber(take()); local s = i; i = i + 2 * ns
  local nc = tonumber(take()); local c = i; i = i + nc
  if redis.call('EXISTS', h) == 1 then
    local z = zspan[b]
    if z then
      local members = {}
      for j = z[1] + 1, z[1] + 2 * z[2] - 1, 2 do members[#members + 1] = ARGV[j] end
      for from = 1, #members, per do
        redis.call('HDEL', h, unpack(members, from, math.min(from + per - 1, #members)))
      end
    end
    local r = rspan[b]
    if r then chunked('HDEL', h, r[1], r[2], 1) end
    if nc > 0 then chunked('HDEL', h, c, nc, 1) end
  end
  if ns > 0 then
    chunked('HSET', h, s, ns, 2)
    if at > 0 then redis.call('EXPIREAT', h, at) end
  end
end
redis.call('HSET', KEYS[1], ARGV[1], ARGV[2])
local t1 = redis.call('TIME')
return {1, (t1[1] - t0[1]) * 1000000 + (t1[2] - t0[2])}
