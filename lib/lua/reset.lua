--[[
  reset: forgets one key's calls, for every process (Throttle.reset): the slots of calls that
  started (running or completed), its pause, its hold and its buckets go, so the next decision finds
  every rule empty but for the calls booked to start later (they keep their slots: they will go out).
  The processes waiting on the key are woken to ask again.

  KEYS[1]  log   sorted set of slots (includes/log.lua)
  KEYS[2]  meta  hash of the key
  KEYS[3]  kept  the namespace's index of kept keys (includes/log.lua); none on a Cluster
  KEYS[4]  mark  the namespace's mark (includes/log.lua); none on a Cluster
  ARGV[1]  RETAIN    ms of history the key keeps (its longest window at least)
  ARGV[2]  CHANNEL   the namespace's channel prefix (includes/waiters.lua)
  ARGV[3]  MAX_HOLD  ms: a slot released later than now + MAX_HOLD was booked ahead, and stays

  A process that still holds calls on the key finds its newest slot gone (includes/check.lua): not
  a loss, since meta `f` keeps the highest score removed (as a fold's), for as long as a slot of that
  score could still count. Returns the number of slots removed.
]]
--- @include "log"
--- @include "waiters"

local log, meta = KEYS[1], KEYS[2]
vt_namespace(KEYS[3], KEYS[4])
local now = vt_now()
local cut = vt_booked_ahead_above(now, tonumber(ARGV[3]))
local top = redis.call('ZREVRANGEBYSCORE', log, cut, '-inf', 'WITHSCORES', 'LIMIT', 0, 1)
local folded_to, waiting = unpack(redis.call('HMGET', meta, 'f', 'w'))
local removed = redis.call('ZREMRANGEBYSCORE', log, '-inf', cut)
redis.call('DEL', meta)
local highest = math.max(tonumber(top[2] or 0), tonumber(folded_to or 0))
local until_ms = highest + tonumber(ARGV[1])
if until_ms > now then
  redis.call('HSET', meta, 'f', string.format('%d', math.ceil(highest)))
  vt_expire(meta, until_ms - now, now)
end
if VT_KEPT ~= nil then vt_take_in(log, now) end
-- Every waiting process asks again: the whole key is free, not one completion's room.
for _, w in ipairs(vt_waiters_parse(waiting)) do
  if w[2] + 1000 >= now then redis.call('PUBLISH', ARGV[2] .. w[1], vt_user_key(log)) end
end
return removed
