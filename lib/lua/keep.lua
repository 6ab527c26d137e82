--[[
  keep: whether the namespace's keys carry times to live (includes/log.lua, "Key lifetimes"). While
  Redis evicts under a volatile-* policy, a kept namespace's keys have none, so that the policy
  cannot pick them; their lifetimes are in the index of kept keys.

  KEYS[1]  kept  the namespace's index of kept keys
  ARGV[1]  MODE  'on': keep the namespace from now on (its index is created, with the sentinel '').
                 'off': gives up to MAX kept keys their times to live back, deleting those whose
                 time has passed; once none is left, the index goes, and the namespace is no longer
                 kept (every script then sets times to live again).
  ARGV[2]  MAX   'off': keys handled by this call at most

  Returns the number of kept keys left ('on': the number kept so far).
]]
local kept = KEYS[1]
if ARGV[1] == 'on' then
  redis.call('ZADD', kept, 'NX', '+inf', '')
  return redis.call('ZCARD', kept) - 1
end
local time = redis.call('TIME')
local now = tonumber(time[1]) * 1000 + tonumber(time[2]) / 1000
local entries = redis.call('ZRANGEBYSCORE', kept, '-inf', '(+inf', 'WITHSCORES', 'LIMIT', 0, tonumber(ARGV[2]))
local names = {}
for i = 1, #entries, 2 do
  local key, at = entries[i], tonumber(entries[i + 1])
  if at <= now then
    redis.call('DEL', key)
  else
    redis.call('PEXPIRE', key, math.ceil(at - now))
  end
  names[#names + 1] = key
end
if #names > 0 then redis.call('ZREM', kept, unpack(names)) end
local left = redis.call('ZCARD', kept) - 1
if left <= 0 then redis.call('DEL', kept) end
return math.max(left, 0)
