-- Recompute one game's team state from its membership and its boards (after team_lib.lua).
-- KEYS[1] membership hash, KEYS[2] window slots. ARGV: aggregate, key prefix, dense ('1':
-- the game keeps distinct-score counts, recounted here), n, (window slots)* (the windows
-- of the game's registry). Used after boards were replaced wholesale (a
-- rebuild's cut-over, a backfill's fill): atomic, so a reader sees the old team boards or
-- the recomputed ones. Answers the number of windows recomputed.
local agg = ARGV[1]; local prefix = ARGV[2]; local dense = ARGV[3] == '1'
local windows = {}
local listed = redis.call('HGETALL', KEYS[2])
for w = 1, #listed, 2 do windows[listed[w]] = tonumber(listed[w + 1]) end
for i = 0, tonumber(ARGV[4]) - 1 do windows[ARGV[5 + 2 * i]] = tonumber(ARGV[6 + 2 * i]) end
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
team_flush(prefix, false)
-- The distinct-score counts, counted again from the team boards just written: complete
-- whatever they held before (a game given dense_ranks after its team boards existed).
if dense then
  for window in pairs(windows) do
    local h = prefix .. 'teams:dense:n:' .. window
    local z = prefix .. 'teams:dense:s:' .. window
    redis.call('DEL', h, z)
    local rows = redis.call('ZRANGE', prefix .. 'teams:' .. window, 0, -1, 'WITHSCORES')
    local floors, delta, index = {}, {}, {}
    for r = 2, #rows, 2 do
      local k = index[rows[r]]
      if k == nil then k = #floors + 1; floors[k] = rows[r]; delta[k] = 0; index[rows[r]] = k end
      delta[k] = delta[k] + 1
    end
    dense_apply(h, z, floors, delta, #rows / 2, 1000)
    team_expire(prefix, window, h); team_expire(prefix, window, z)
  end
end
return done
