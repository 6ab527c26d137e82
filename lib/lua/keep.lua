--[[
  keep: whether the namespace's keys carry times to live (includes/log.lua, "Key lifetimes"). While
  Redis evicts under a volatile-* policy, a kept namespace's keys have none, so that the policy
  cannot pick them; their lifetimes are in the index of kept keys.

  KEYS[1]  kept   the namespace's index of kept keys
  KEYS[2]  seen   when a process last saw Redis evict (store clock ms), while the namespace is kept
  ARGV[1]  MODE   'on': keep the namespace (its index is created, with the sentinel ''), and note
                  that evictions were seen now. A process that sees them calls it every heartbeat.
                  'off': unless evictions were seen less than QUIET ms ago (by any process), gives
                  up to MAX kept keys their times to live back, deleting those whose time has
                  passed; once none is left, the index goes, and the namespace is no longer kept
                  (every script then sets times to live again).
  ARGV[2]  MAX    'off': keys handled by this call at most
  ARGV[3]  QUIET  'off': ms without evictions seen before the namespace may stop being kept

  Returns the number of kept keys left ('on': kept so far; 'off': -1 when refused, evictions were
  seen lately).
]]
--- @include "log"

local kept, seen = KEYS[1], KEYS[2]
local now = vt_now()
if ARGV[1] == 'on' then
  redis.call('ZADD', kept, 'NX', '+inf', '')
  redis.call('SET', seen, math.floor(now))
  return redis.call('ZCARD', kept) - 1
end
local last = tonumber(redis.call('GET', seen) or 0)
if now - last < tonumber(ARGV[3]) then return -1 end
local entries = redis.call('ZRANGEBYSCORE', kept, '-inf', '(+inf', 'WITHSCORES', 'LIMIT', 0, tonumber(ARGV[2]))
local names = {}
for i = 1, #entries, 2 do
  local key, at = entries[i], tonumber(entries[i + 1])
  -- A key given a time to live meanwhile (a process of an earlier version) keeps it, unless longer.
  local own = redis.call('PTTL', key) == -1
  if at <= now then
    if own then redis.call('DEL', key) end
  elseif own then
    redis.call('PEXPIRE', key, math.ceil(at - now))
  else
    redis.call('PEXPIRE', key, math.ceil(at - now), 'GT')
  end
  names[#names + 1] = key
end
if #names > 0 then redis.call('ZREM', kept, unpack(names)) end
local left = redis.call('ZCARD', kept) - 1
if left <= 0 then redis.call('DEL', kept, seen) end
return math.max(left, 0)
