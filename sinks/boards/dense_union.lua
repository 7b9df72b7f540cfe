-- A sharded dense game's counts over all its shards: one shard partition's queued
-- count changes (apply_group.lua's outbox), applied once and in order.
-- KEYS[1] the game's meta:dense:wm, KEYS[2..] the game's counts and floor sets.
-- ARGV: name ('<shard>|<topic>/<partition>'), members per command, n entries; per
-- entry: offset, previous entry's offset, n boards; per board: counts and scores
-- key indexes, expiry (0: none), n, (floor, change)*.
-- Answers {1, offset applied up to, microseconds Redis spent} or {-1, offset, 0} when
-- the changes do not follow what is applied (Redis lost writes of one side): '!'
-- then says so, until lb rebuild recounts.
local t0 = redis.call('TIME')
local name = ARGV[1]; local per = tonumber(ARGV[2])
local wm = tonumber(redis.call('HGET', KEYS[1], name) or '-1')
if redis.call('HEXISTS', KEYS[1], '!') == 1 then return {-1, wm, 0} end
local i = 4
for _ = 1, tonumber(ARGV[3]) do
  local offset = tonumber(ARGV[i]); local prev = tonumber(ARGV[i + 1])
  local nb = tonumber(ARGV[i + 2]); i = i + 3
  local apply = offset > wm
  if apply and prev ~= wm then
    redis.call('HSET', KEYS[1], '!', name .. ' holds ' .. wm .. ', next change follows ' .. prev)
    return {-1, wm, 0}
  end
  for _ = 1, nb do
    local h = KEYS[tonumber(ARGV[i])]; local z = KEYS[tonumber(ARGV[i + 1])]
    local exp = tonumber(ARGV[i + 2]); local n = tonumber(ARGV[i + 3]); i = i + 4
    if apply then
      local floors, delta, total = {}, {}, 0
      for k = 1, n do
        floors[k] = ARGV[i + 2 * k - 2]; delta[k] = tonumber(ARGV[i + 2 * k - 1])
        total = total + delta[k]
      end
      dense_apply(h, z, floors, delta, total, per)
      if exp > 0 then redis.call('EXPIREAT', h, exp); redis.call('EXPIREAT', z, exp) end
    end
    i = i + 2 * n
  end
  if apply then wm = offset end
end
redis.call('HSET', KEYS[1], name, wm)
local t1 = redis.call('TIME')
return {1, wm, (t1[1] - t0[1]) * 1000000 + (t1[2] - t0[2])}
