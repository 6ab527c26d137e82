--[[
  settle: updates booked slots of one key without deciding anything: a call's completion, or a
  release (the call never started). Trims nothing: a call still in flight may have an old score
  that only the next decision moves up (vt_overdue).

  KEYS[1]  log   sorted set of slots (see reserve.lua)
  KEYS[2]  meta  hash of the key
  KEYS[3]  flight  sorted set of the slots not settled yet (see reserve.lua)
  ARGV[1]  RETAIN  ms of history to keep
  ARGV[2]  S, followed by S pairs: MEMBER, RELEASE_AT ('' = remove)

  Returns the number of slots left in the log.
]]
--- @include "log"

local log, meta, flight = KEYS[1], KEYS[2], KEYS[3]
local retain = tonumber(ARGV[1])
local now_ms = math.ceil(vt_now())

vt_settle(log, flight, 3, tonumber(ARGV[2]))
vt_expire(log, meta, flight, now_ms, retain, tonumber(redis.call('HGET', meta, 'pause') or 0), 0)
return redis.call('ZCARD', log)
