-- One board group's atomic write (sinks/boards/encoding.py builds the arguments).
-- KEYS[1] watermark hash, KEYS[2] stats hash, KEYS[3] board registry, KEYS[4..] boards/seen
-- ARGV: field, offset, expected watermark, members per command, then counted sections.
-- Answers {outcome, microseconds Redis spent writing}: outcome 1 applied, 0 applied
-- before, -2 - stored when refused (encoding.refused_at); a sharded dense game's
-- applied or applied-before write adds {outbox key, field, queued changes}.
-- Dense ranks: ARGV[#ARGV - 1] is where the distinct-count section starts (0: none).
-- Fence: the last key is the group's fence, the last argument the writer's epoch
-- (0: not a leased deployment, unchecked). A deposed deployment's epoch is below it.
local epoch = tonumber(ARGV[#ARGV])
if epoch > 0 then
  local fence = tonumber(redis.call('GET', KEYS[#KEYS]) or '0')
  if epoch < fence then return redis.error_reply('FENCED ' .. fence) end
  if epoch > fence then redis.call('SET', KEYS[#KEYS], epoch) end
end
-- A sharded dense game's shard queues its count changes in an outbox for the
-- game-wide counts (sinks/boards/dense_union.lua); every answer carries what is
-- queued for this partition, so a crash between the two writes is repaired by
-- the replayed batch's answer (0: applied before).
local dense = tonumber(ARGV[#ARGV - 1])
local outbox = nil
if dense > 0 and tonumber(ARGV[dense]) > 0 then outbox = KEYS[tonumber(ARGV[dense])] end
local cur = tonumber(redis.call('HGET', KEYS[1], ARGV[1]) or '-1')
if cur >= tonumber(ARGV[2]) then
  if outbox then return {0, 0, outbox, ARGV[1], redis.call('HGET', outbox, ARGV[1]) or ''} end
  return {0, 0}
end
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
-- Distinct-score counts of dense-ranked boards (encoding.distinct_args): a section
-- of its own at the end, found through ARGV[#ARGV - 1] and applied before the
-- members change, so an unknown old value is still there to read (dense_lib.lua).
local queued = {}                         -- per board: window, expiry, (floor, change)*
if dense > 0 then
  local j = dense + 2
  for _ = 1, tonumber(ARGV[dense + 1]) do  -- window, board, counts, scores, slots, expiry, ...
    local window = ARGV[j]; j = j + 1
    local b = KEYS[tonumber(ARGV[j])]; local h = KEYS[tonumber(ARGV[j + 1])]
    local z = KEYS[tonumber(ARGV[j + 2])]; local slots = tonumber(ARGV[j + 3])
    local exp = tonumber(ARGV[j + 4]); local n = tonumber(ARGV[j + 5]); j = j + 6
    -- No board (never written, or its window expired): no member had a value,
    -- whatever the planner remembers, and counts left behind are dropped.
    local present = redis.call('EXISTS', b) == 1
    if not present then redis.call('UNLINK', h, z) end
    local floors, delta, total = {}, {}, 0
    for k = 1, n do                        -- floor, members reaching it, members leaving it
      local d = tonumber(ARGV[j + 1])
      if present then d = d - tonumber(ARGV[j + 2]) end
      floors[k] = ARGV[j]; delta[k] = d; total = total + d
      j = j + 3
    end
    local m = tonumber(ARGV[j]); j = j + 1
    if m > 0 and present then              -- members removed with a value never read
      local index = {}
      for k = 1, n do index[floors[k]] = k end
      for at = j, j + m - 1, per do
        local part = redis.call('ZMSCORE', b, unpack(ARGV, at, math.min(at + per - 1, j + m - 1)))
        for _, c in ipairs(part) do
          if c then
            local v = tonumber(c)
            local f = string.format('%d', v - math.fmod(v, slots))
            local k = index[f]
            if k == nil then n = n + 1; k = n; floors[k] = f; delta[k] = 0; index[f] = k end
            delta[k] = delta[k] - 1; total = total - 1
          end
        end
      end
    end
    j = j + m
    dense_apply(h, z, floors, delta, total, per)
    if exp == 0 then exp = math.floor(redis.call('PEXPIRETIME', b) / 1000) end
    if exp > 0 then redis.call('EXPIREAT', h, exp); redis.call('EXPIREAT', z, exp) end
    if outbox then
      local line = {window, string.format('%d', math.max(exp, 0))}
      for k, f in ipairs(floors) do
        if delta[k] ~= 0 then line[#line + 1] = f; line[#line + 1] = delta[k] end
      end
      if #line > 2 then queued[#queued + 1] = table.concat(line, ' ') end
    end
  end
end
-- The outbox field of this partition: entries '=<offset> <previous entry's offset>'
-- then one line per board (dense_union.lua applies them, TRIM_OUTBOX drops them).
local pending = nil
if outbox then
  pending = redis.call('HGET', outbox, ARGV[1]) or ''
  if #queued > 0 then
    local last = redis.call('HGET', outbox, ARGV[1] .. '@') or '-1'
    pending = pending .. '=' .. ARGV[2] .. ' ' .. last .. '\n' .. table.concat(queued, '\n') .. '\n'
    redis.call('HSET', outbox, ARGV[1], pending, ARGV[1] .. '@', ARGV[2])
  end
end
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
for _ = 1, tonumber(take()) do            -- hdel: key index, n, field* (erasures)
  local k = KEYS[tonumber(take())]; local n = tonumber(take())
  chunked('HDEL', k, i, n, 1); i = i + n
end
if tonumber(take()) > 0 then             -- teams: 1, of, slots, agg, prefix, dense, n, (w s)*, m, (w p v)*
  local of = KEYS[tonumber(take())]; local slots = KEYS[tonumber(take())]
  local agg = take(); local prefix = take(); local counted = take() == '1'
  for _ = 1, tonumber(take()) do redis.call('HSET', slots, take(), take()) end
  for _ = 1, tonumber(take()) do
    local w = take(); local p = take(); local v = take()
    local team = redis.call('HGET', of, p)
    if team then team_put(prefix, agg, w, team, p, v ~= '' and tonumber(v)) end
  end
  team_flush(prefix, counted)
end
redis.call('HSET', KEYS[1], ARGV[1], ARGV[2])
local t1 = redis.call('TIME')
local spent = (t1[1] - t0[1]) * 1000000 + (t1[2] - t0[2])
if outbox then return {1, spent, outbox, ARGV[1], pending} end
return {1, spent}
