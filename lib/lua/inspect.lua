--[[
  inspect: reads one key's usage without changing anything.

  KEYS[1]  log   sorted set of slots (see includes/log.lua)
  KEYS[2]  meta  hash of the key
  ARGV[1]  R, number of rules, followed by R triples: LIMIT, WINDOW (ms), BUCKET (ms, 0 = exact),
           then optionally MAX_HOLD (ms): a slot whose score is above now + MAX_HOLD (now rounded
           up, plus 1 ms) was booked to start later (booked ahead), and is counted apart from the
           calls that started

  Returns { now_ms, next_free_in_ms, paused_for_ms, booked_ahead, stored, used_1, reset_in_ms_1,
  ..., used_R, reset_in_ms_R }. A call in flight is taken to end now (the earliest it can), so
  next_free_in_ms is the soonest one more call could start (a vendor pause, or a hold after a loss,
  included), and reset_in_ms when the oldest counted call stops counting at the soonest. used
  leaves out the slots booked ahead (0 without MAX_HOLD); stored is 1 when the key has a log or
  meta at all, 0 when Redis holds nothing for it.
]]
--- @include "log"
--- @include "buckets"

local log, meta = KEYS[1], KEYS[2]
local rule_count = tonumber(ARGV[1])
local now = vt_now()
local now_ms = math.ceil(now)
-- What no longer counts at CUT (the clock rounded down) no longer counts at now, as in decide.lua.
local cut = math.floor(now)

local size = redis.call('ZCARD', log)
local paused_until, held_until = unpack(redis.call('HMGET', meta, 'pause', 'h'))
local pause = tonumber(paused_until or 0)
-- A key held after a loss (includes/check.lua) takes no call before its hold either.
local start_at = math.max(now, pause, tonumber(held_until or 0))
local max_hold = tonumber(ARGV[2 + 3 * rule_count])
local ahead = 0
if max_hold then ahead = redis.call('ZCOUNT', log, '(' .. vt_booked_ahead_above(now, max_hold), '+inf') end
local stored = 0
if size > 0 or redis.call('EXISTS', meta) == 1 then stored = 1 end
local result = { now_ms, 0, math.max(0, math.ceil(pause - now)), ahead, stored }
for r = 0, rule_count - 1 do
  local limit = tonumber(ARGV[2 + 3 * r])
  local window = tonumber(ARGV[3 + 3 * r])
  local bucket = tonumber(ARGV[4 + 3 * r])
  local floor = '(' .. (cut - window)
  local used = redis.call('ZCOUNT', log, floor, '+inf')
  local oldest = math.huge
  if used > 0 then oldest = tonumber(redis.call('ZRANGEBYSCORE', log, floor, '+inf', 'WITHSCORES', 'LIMIT', 0, 1)[2]) end
  if bucket > 0 then
    local buckets = vt_buckets(meta, window, bucket, cut)
    for _, b in ipairs(buckets) do used = used + b[2] end
    if #buckets > 0 then oldest = math.min(oldest, buckets[1][1]) end
    local free_at = vt_bucketed_free_at(log, size, buckets, limit, window, 1, start_at)
    if free_at > start_at then start_at = free_at end
  else
    local index = size - limit
    if index >= 0 then
      local free_at = math.min(now_ms, tonumber(redis.call('ZRANGE', log, index, index, 'WITHSCORES')[2])) + window
      if free_at > start_at then start_at = free_at end
    end
  end
  local reset = 0
  if oldest < math.huge then reset = math.ceil(math.min(oldest, now_ms) + window - now) end
  result[6 + 2 * r] = used - ahead
  result[7 + 2 * r] = reset
end
if start_at > now then result[2] = math.ceil(start_at - now) end
return result
