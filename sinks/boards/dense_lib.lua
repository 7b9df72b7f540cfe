-- Distinct-score counts (docs/DESIGN.md, "Dense ranks: distinct-score counts"): the one
-- update every counted board goes through, the player boards' group write
-- (apply_group.lua), the game-wide counts of a sharded game (dense_union.lua) and the
-- team boards (sinks/teams/team_lib.lua).
-- h: hash value -> holders, '#' -> holders counted; z: sorted set of the values held
-- (member = score = the value's text). floors[k] gains delta[k] holders (negative: loses
-- them), total = the sum of delta. Batched: one HMGET of the values touched, then one
-- HSET of the new counts, one HDEL of the values no one holds any more, one ZADD/ZREM of
-- the values that appear or disappear, `per` values per command at most. A count never
-- goes below zero (holders a board had before it kept counts are not in them), while '#'
-- moves by total, so '#' equals the board's size only when the counts hold every holder.
local function dense_apply(h, z, floors, delta, total, per)
  local function each(cmd, key, list)
    for at = 1, #list, per do redis.call(cmd, key, unpack(list, at, math.min(at + per - 1, #list))) end
  end
  local function pairwise(cmd, key, list)
    for at = 1, #list, 2 * per do redis.call(cmd, key, unpack(list, at, math.min(at + 2 * per - 1, #list))) end
  end
  local set, del, enter, leave = {}, {}, {}, {}
  if #floors > 0 then
    local had = {}
    for at = 1, #floors, per do
      local part = redis.call('HMGET', h, unpack(floors, at, math.min(at + per - 1, #floors)))
      for _, c in ipairs(part) do had[#had + 1] = tonumber(c) or 0 end
    end
    for k, f in ipairs(floors) do
      local now = had[k] + delta[k]
      if now == had[k] then
        -- as many came as went: nothing changes
      elseif now > 0 then
        set[#set + 1] = f; set[#set + 1] = now
        if had[k] <= 0 then enter[#enter + 1] = f; enter[#enter + 1] = f end
      elseif had[k] ~= 0 then
        del[#del + 1] = f
        if had[k] > 0 then leave[#leave + 1] = f end
      end
    end
  end
  if #set > 0 then pairwise('HSET', h, set) end
  if #del > 0 then each('HDEL', h, del) end
  if #enter > 0 then pairwise('ZADD', z, enter) end
  if #leave > 0 then each('ZREM', z, leave) end
  if total ~= 0 and redis.call('HINCRBY', h, '#', total) == 0 then redis.call('HDEL', h, '#') end
end
