--[[
  pause: no call of this key may start before now + MS, in any process (the vendor said its limit
  was hit: 429 with Retry-After, X-RateLimit-Reset, ...). A later pause already set is kept.

  KEYS[1]  meta  hash of the key (includes/log.lua); field `pause` = no start before this (ms)
  KEYS[2]  kept  the namespace's index of kept keys (includes/log.lua); none on a Cluster
  ARGV[1]  MS    pause length from now, ms

  Returns the end of the pause in force (ms, store clock).
]]
--- @include "log"

local meta = KEYS[1]
vt_kept(KEYS[2])
local now_ms = math.ceil(vt_now())
local pause = math.max(now_ms + math.ceil(tonumber(ARGV[1])), tonumber(redis.call('HGET', meta, 'pause') or 0))
redis.call('HSET', meta, 'pause', pause)
vt_keep(meta, pause - now_ms + 1, now_ms)
return pause
