--[[
  pause: no call of this key may start before now + MS, in any process (the vendor said its limit
  was hit: 429 with Retry-After, X-RateLimit-Reset, ...). A later pause already set is kept.

  KEYS[1]  log   sorted set of slots (see includes/ops.lua)
  KEYS[2]  meta  hash of the key; field `pause` = no start before this (ms, store clock)
  KEYS[3]  flight  sorted set of the slots not settled yet (see includes/ops.lua)
  ARGV[1]  MS      pause length from now, ms
  ARGV[2]  RETAIN  ms of history to keep

  Returns the end of the pause in force (ms, store clock).
]]
--- @include "log"

local log, meta, flight = KEYS[1], KEYS[2], KEYS[3]
local now = vt_now()
local now_ms = math.ceil(now)
local pause = math.max(math.ceil(now + tonumber(ARGV[1])), tonumber(redis.call('HGET', meta, 'pause') or 0))
redis.call('HSET', meta, 'pause', pause)
vt_expire(log, meta, flight, now_ms, tonumber(ARGV[2]), pause, 0)
return pause
