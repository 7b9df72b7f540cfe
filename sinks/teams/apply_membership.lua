-- One batch of membership records applied to one game's team boards (after team_lib.lua).
-- KEYS[1] membership hash, KEYS[2] membership watermarks, KEYS[3] window slots.
-- ARGV: field (<topic>/<p>), through, aggregate, key prefix, dense ('1': the game keeps
-- distinct-score counts), n, (offset player team)* (team '': none). Records at or
-- below the stored watermark were applied before and are skipped; the watermark
-- becomes `through` (the batch's last offset, dead letters included). Answers how many records changed a player's team.
local cur = tonumber(redis.call('HGET', KEYS[2], ARGV[1]) or '-1')
local agg = ARGV[3]; local prefix = ARGV[4]; local dense = ARGV[5] == '1'
-- Windows whose board is gone (expired, or every member retracted) hold no team
-- state either: forget them (a group write adds a window back when it scores).
local windows = {}
local listed = redis.call('HGETALL', KEYS[3])
for w = 1, #listed, 2 do
  if redis.call('EXISTS', prefix .. listed[w]) == 1 then
    windows[#windows + 1] = listed[w]; windows[#windows + 1] = listed[w + 1]
  else redis.call('HDEL', KEYS[3], listed[w]) end
end
local moved = 0
for j = 0, tonumber(ARGV[6]) - 1 do
  local offset = tonumber(ARGV[7 + 3 * j])
  local player = ARGV[8 + 3 * j]; local team = ARGV[9 + 3 * j]
  if offset > cur then
    local old = redis.call('HGET', KEYS[1], player) or ''
    if old ~= team then
      moved = moved + 1
      if team == '' then redis.call('HDEL', KEYS[1], player)
      else redis.call('HSET', KEYS[1], player, team) end
      for w = 1, #windows, 2 do
        local window = windows[w]
        local value = redis.call('ZSCORE', prefix .. window, player)
        if value then
          if old ~= '' then team_put(prefix, agg, window, old, player, false) end
          if team ~= '' then
            team_put(prefix, agg, window, team, player, team_score(value, tonumber(windows[w + 1])))
          end
        end
      end
    end
  end
end
team_flush(prefix, dense)
if tonumber(ARGV[2]) > cur then redis.call('HSET', KEYS[2], ARGV[1], ARGV[2]) end
return moved
