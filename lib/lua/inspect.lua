--[[
  inspect: reads one key's usage without changing anything.

  KEYS[1]  log   sorted set of slots (see includes/log.lua)
  KEYS[2]  meta  hash of the key
  ARGV[1]  R, number of rules, followed by R triples: LIMIT, WINDOW (ms), BUCKET (ms, 0 = exact),
           then optionally MAX_HOLD (ms): a slot whose score is above now + MAX_HOLD (now rounded
           up, plus 1 ms) was booked to start later (booked ahead), and is counted apart from the
           calls that started

  Returns { now_ms, next_free_in_ms, paused_for_ms, booked_ahead, stored, X, then per rule (the R
  given, then X learned rules of other windows): used, reset_in_ms, limit; then L learned entries
  (includes/learned.lua): LIMIT, WINDOW, LAPSE_IN_MS, SOURCE each }. A rule's limit is the tighter
  of its own and what the key learned for its window (vt_learned_limit). A call in flight is taken to end now (the
  earliest it can), so next_free_in_ms is the soonest one more call could start (a vendor pause,
  or a hold after a loss, included), and reset_in_ms when the oldest counted call stops counting at
  the soonest. used leaves out the slots booked ahead (0 without MAX_HOLD); stored is 1 when the key
  has a log or meta at all, 0 when Redis holds nothing for it.
]]
--- @include "log"
--- @include "buckets"
--- @include "learned"

local log, meta = KEYS[1], KEYS[2]
local rule_count = tonumber(ARGV[1])
local now = vt_now()
local now_ms = math.ceil(now)
-- What no longer counts at CUT (the clock rounded down) no longer counts at now, as in decide.lua.
local cut = math.floor(now)

local size = redis.call('ZCARD', log)
local paused_until, held_until, learned_text = unpack(redis.call('HMGET', meta, 'pause', 'h', 'l'))
local pause = tonumber(paused_until or 0)
-- A key held after a loss (includes/check.lua) takes no call before its hold either.
local start_at = math.max(now, pause, tonumber(held_until or 0))
local max_hold = tonumber(ARGV[2 + 3 * rule_count])
local ahead = 0
if max_hold then ahead = redis.call('ZCOUNT', log, '(' .. vt_booked_ahead_above(now, max_hold), '+inf') end
local stored = 0
if size > 0 or redis.call('EXISTS', meta) == 1 then stored = 1 end
local limits, windows, buckets_of = {}, {}, {}
for r = 0, rule_count - 1 do
  limits[r], windows[r], buckets_of[r] = tonumber(ARGV[2 + 3 * r]), tonumber(ARGV[3 + 3 * r]), tonumber(ARGV[4 + 3 * r])
end
local learned = vt_learned_parse(learned_text, now)
local count = rule_count
for _, entry in ipairs(learned) do
  local found = false
  for r = 0, rule_count - 1 do
    if windows[r] == entry[2] then
      found = true
      limits[r] = vt_learned_limit(limits[r], entry)
    end
  end
  if not found then
    limits[count], windows[count], buckets_of[count] = entry[1], entry[2], 0
    count = count + 1
  end
end
local result = { now_ms, 0, math.max(0, math.ceil(pause - now)), ahead, stored, count - rule_count }
for r = 0, count - 1 do
  local limit, window, bucket = limits[r], windows[r], buckets_of[r]
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
  result[7 + 3 * r] = used - ahead
  result[8 + 3 * r] = reset
  result[9 + 3 * r] = limit
end
result[#result + 1] = #learned
vt_learned_reply(learned, now_ms, result)
if start_at > now then result[2] = math.ceil(start_at - now) end
return result
