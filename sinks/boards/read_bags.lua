-- Many keys' HMGETs in one call (sinks/boards/reads.py builds the arguments): a
-- replayed history's dedupe lookups ask thousands of keys for a field or two each,
-- and one reply for all of them spares a command and a reply per key.
-- KEYS: the hashes; ARGV: each key's field count, in order, then every field.
-- Answers the values in order, a missing one as nil, like one long HMGET.
local out, at = {}, #KEYS + 1
for k = 1, #KEYS do
  local n = tonumber(ARGV[k])
  local got = redis.call('HMGET', KEYS[k], unpack(ARGV, at, at + n - 1))
  for j = 1, n do out[#out + 1] = got[j] end
  at = at + n
end
return out
