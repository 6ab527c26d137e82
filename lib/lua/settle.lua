--[[
  settle: updates booked slots of one key without deciding anything: a call's completion, or a
  release (the call never started). Trims nothing: a call still in flight may have an old score
  that only the next decision moves up (vt_overdue).

  KEYS[1]  log   sorted set of slots (see reserve.lua)
  KEYS[2]  meta  hash of the key
  KEYS[3]  flight  sorted set of the slots not settled yet (see reserve.lua)
  ARGV[1]  RETAIN  ms of history to keep
  ARGV[2]  S, followed by S pairs: MEMBER, RELEASE_AT ('' = remove)

  Returns 0.
]]
--- @include "log"

local log, meta, flight = KEYS[1], KEYS[2], KEYS[3]
local retain = tonumber(ARGV[1])
local now_ms = math.ceil(vt_now())

local latest = vt_settle(log, flight, 3, tonumber(ARGV[2]))
-- A completion only ever needs the keys to live longer (a late one): extend, never shorten.
if latest > 0 then
  local ttl = math.ceil(latest + retain - now_ms)
  if ttl > redis.call('PTTL', log) then
    redis.call('PEXPIRE', log, ttl)
    redis.call('PEXPIRE', meta, ttl)
    redis.call('PEXPIRE', flight, ttl)
  end
end
return 0
