--[[
  pause: no call of this key may start before now + MS, in any process (the vendor said its limit
  was hit: 429 with Retry-After, X-RateLimit-Reset, ...). A later pause already set is kept.

  Slots booked ahead to start before the pause ends are taken out of the log: their calls cannot
  start on them (each learns of the pause when its start comes, and books again), and the room they
  held goes to whoever asks first from now on, before them: the requests the vendor refused, which
  are retried at once, come back ahead of the calls that had booked later slots. The pause is
  announced on CHANNEL, '<end> <key>', to the processes that hold slots booked ahead in the
  namespace (lib/stores/redis-pauses.ts): their calls learn of it there instead of each reading it.

  KEYS[1]  meta      hash of the key (includes/log.lua); field `pause` = no start before this (ms)
  KEYS[2]  log       sorted set of the key's slots
  KEYS[3]  kept      the namespace's index of kept keys (includes/log.lua); none on a Cluster
  KEYS[4]  mark      the namespace's mark (includes/log.lua); none on a Cluster
  ARGV[1]  MS        pause length from now, ms
  ARGV[2]  MAX_HOLD  the caller's maxHoldMs: a slot scored above now + MAX_HOLD was booked ahead
                     (includes/log.lua, vt_booked_ahead_above); 0 leaves the log alone
  ARGV[3]  CHANNEL   the namespace's pause channel (none: not announced)

  Returns the end of the pause in force (ms, store clock).
]]
--- @include "log"

local meta, log = KEYS[1], KEYS[2]
vt_namespace(KEYS[3], KEYS[4])
local now = vt_now()
local now_ms = math.ceil(now)
local pause = math.max(now_ms + math.ceil(tonumber(ARGV[1])), tonumber(redis.call('HGET', meta, 'pause') or 0))
redis.call('HSET', meta, 'pause', pause)
vt_mark(pause)
vt_keep(meta, pause - now_ms + 1, now_ms)
local max_hold = tonumber(ARGV[2] or 0)
if max_hold > 0 then
  local above, below = '(' .. vt_booked_ahead_above(now, max_hold), '(' .. (pause + max_hold)
  local top = redis.call('ZREVRANGEBYSCORE', log, below, above, 'WITHSCORES', 'LIMIT', 0, 1)
  if top[2] ~= nil then
    redis.call('ZREMRANGEBYSCORE', log, above, below)
    vt_took_out(log, meta, tonumber(top[2]), now)
  end
end
if ARGV[3] then redis.call('PUBLISH', ARGV[3], string.format('%d', pause) .. ' ' .. vt_user_key(log)) end
return pause
