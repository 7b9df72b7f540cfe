-- Team boards (domain/teams.py): shared by the group write and the membership write.
-- team_put makes one (window, team, player) agree with the player's current
-- score (false: not on that window, or not in that team): the members set,
-- the team's sum and its place on the team board. State in, state out: applying
-- it twice, or after any other call, leaves the same keys.
-- A team key lives as long as its window's board: same expiry, and gone with it
-- (a late write's EXPIREAT in the past deletes the board at once).
local function team_expire(prefix, window, key)
  local at = redis.call('EXPIRETIME', prefix .. window)
  if at > 0 then redis.call('EXPIREAT', key, at)
  elseif at == -2 then redis.call('DEL', key) end
end
-- Team aggregates this call may change: (window, team) -> its aggregate before
-- (false: not on the board), in the order first touched. team_flush appends the ones
-- that did change to the game's team change stream (the live pushes follow it).
local team_before, team_touched = {}, {}
local function team_note(board, window, team)
  local id = window .. ' ' .. team
  if team_before[id] == nil then
    team_before[id] = redis.call('ZSCORE', board, team) or false
    team_touched[#team_touched + 1] = {window, team, id}
  end
end
-- A game with dense_ranks keeps distinct-score counts beside each team board
-- (teams:dense:n:<window>, teams:dense:s:<window>; domain.teams.TeamKeys): the
-- aggregates that changed move them in the same call, through dense_lib.lua's
-- dense_apply (a value is the aggregate as Redis stores it, decimal text).
local function team_count(prefix, moved, order)
  for _, window in ipairs(order) do
    local m = moved[window]
    local h = prefix .. 'teams:dense:n:' .. window
    local z = prefix .. 'teams:dense:s:' .. window
    dense_apply(h, z, m.floors, m.delta, m.total, 1000)
    team_expire(prefix, window, h); team_expire(prefix, window, z)
  end
end
local function team_moved(moved, order, window, value, by)
  local m = moved[window]
  if m == nil then
    m = {floors = {}, delta = {}, index = {}, total = 0}
    moved[window] = m; order[#order + 1] = window
  end
  local k = m.index[value]
  if k == nil then k = #m.floors + 1; m.floors[k] = value; m.delta[k] = 0; m.index[value] = k end
  m.delta[k] = m.delta[k] + by; m.total = m.total + by
end
-- The stream is capped like the boards' change streams (domain.keys.CHANGES_MAXLEN).
-- dense: also move the distinct-score counts of the boards changed (see above).
local function team_flush(prefix, dense)
  local out = {}
  local moved, order = {}, {}
  for _, t in ipairs(team_touched) do
    local now = redis.call('ZSCORE', prefix .. 'teams:' .. t[1], t[2]) or false
    local was = team_before[t[3]]
    if now ~= was then
      out[#out + 1] = {w = t[1], p = t[2], o = was or '', n = now or ''}
      if dense and was then team_moved(moved, order, t[1], was, -1) end
      if dense and now then team_moved(moved, order, t[1], now, 1) end
    end
  end
  team_before, team_touched = {}, {}
  if dense then team_count(prefix, moved, order) end
  if #out > 0 then
    redis.call('XADD', prefix .. 'teams:changes', 'MAXLEN', '~', 10000, '*', 'c', cjson.encode(out))
  end
end
local function team_put(prefix, agg, window, team, player, score)
  local mkey = prefix .. 'team:' .. window .. ':' .. team
  local old = redis.call('ZSCORE', mkey, player)
  if not score and not old then return end
  local sums = prefix .. 'teams:sum:' .. window
  local board = prefix .. 'teams:' .. window
  team_note(board, window, team)
  if score then redis.call('ZADD', mkey, score, player) else redis.call('ZREM', mkey, player) end
  local sum = redis.call('HINCRBY', sums, team, (score or 0) - tonumber(old or '0'))
  local n = redis.call('ZCARD', mkey)
  if n == 0 then
    redis.call('HDEL', sums, team); redis.call('ZREM', board, team); return
  end
  local value = sum
  if agg == 'avg' then value = sum / n
  elseif agg == 'best' then value = redis.call('ZREVRANGE', mkey, 0, 0, 'WITHSCORES')[2] end
  redis.call('ZADD', board, value, team)
  team_expire(prefix, window, mkey); team_expire(prefix, window, sums)
  team_expire(prefix, window, board)
end
-- A board value (composite, desc order) -> the member's score (docs/DESIGN.md, Boards).
local function team_score(composite, slots)
  local c = tonumber(composite)
  return (c - math.fmod(c, slots)) / slots
end
