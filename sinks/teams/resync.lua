-- Recompute one game's team state from its membership and its boards (after team_lib.lua).
-- KEYS[1] membership hash, KEYS[2] window slots. ARGV: aggregate, key prefix, n, (window slots)*
-- (the windows of the game's registry). Used after boards were replaced wholesale (a
-- rebuild's cut-over, a backfill's fill): atomic, so a reader sees the old team boards or
-- the recomputed ones. Answers the number of windows recomputed.
local agg = ARGV[1]; local prefix = ARGV[2]
local windows = {}
local listed = redis.call('HGETALL', KEYS[2])
for w = 1, #listed, 2 do windows[listed[w]] = tonumber(listed[w + 1]) end
for i = 0, tonumber(ARGV[3]) - 1 do windows[ARGV[4 + 2 * i]] = tonumber(ARGV[5 + 2 * i]) end
local members = redis.call('HGETALL', KEYS[1])
local teams = {}
for i = 2, #members, 2 do teams[members[i]] = true end
local done = 0
for window, slots in pairs(windows) do
  local board = prefix .. 'teams:' .. window
  for _, team in ipairs(redis.call('ZRANGE', board, 0, -1)) do
    teams[team] = true; team_note(board, window, team)
  end
  for team in pairs(teams) do redis.call('DEL', prefix .. 'team:' .. window .. ':' .. team) end
  redis.call('DEL', board, prefix .. 'teams:sum:' .. window)
  if redis.call('EXISTS', prefix .. window) == 1 then
    redis.call('HSET', KEYS[2], window, slots)
    done = done + 1
    for i = 1, #members, 2 do
      local value = redis.call('ZSCORE', prefix .. window, members[i])
      if value then
        team_put(prefix, agg, window, members[i + 1], members[i], team_score(value, slots))
      end
    end
  else
    redis.call('HDEL', KEYS[2], window)
  end
end
team_flush(prefix)
return done
