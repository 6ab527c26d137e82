--[[
  reserve: one decision for one key. Finds the earliest start at which COST more calls keep every
  rule, and books it unless it is further away than MAX_DELAY. See docs/design.md.

  KEYS[1]  log   sorted set, one member per slot: while the call's completion is unknown the member
                is the slot number and the score start + HOLD (an estimate); once settled the
                member is the number followed by '!' and the score the completion time (ms)
  KEYS[2]  meta  hash: seq = last slot number, last = latest booked start (ms),
                pause = no start before this (ms), set by pause.lua when the vendor says so
  KEYS[3]  flight  sorted set: the slots not settled yet, scored by their estimate (start + HOLD)

  ARGV[1]  COST       slots to book (1 .. smallest limit)
  ARGV[2]  MAX_DELAY  ms; book only if the slot starts within it; 'inf' books any slot
  ARGV[3]  HOLD       ms a booked slot counts as in flight after its start, until settled
  ARGV[4]  RETAIN     ms of history to keep (at least the longest window)
  ARGV[5]  DEFER      1: do not book a slot that waits for a call whose completion is not known
                      (its member unsettled); answer 'deferred' with a time to ask again
  ARGV[6]  MAX_HOLD   ms after its estimate an unsettled call may still be in flight
  ARGV[7]  R          number of rules, followed by R pairs: LIMIT, WINDOW (ms)
  ARGV[8 + 2R]        S, number of settlements, followed by S pairs: MEMBER, RELEASE_AT ('' = remove)

  Returns { status, wait_ms, start_at, rule_index, first_member, now_ms, tentative (1|0), retry_ms }
  status: 1 booked, 0 refused (wait_ms > MAX_DELAY), 2 deferred (ask again in retry_ms).
  rule_index: 0-based index of the rule that pushed the slot later, -2 = vendor pause, -1 = neither.
  tentative: the slot was set by an estimate (a call whose completion is not known): confirm.lua
  checks it again when it is due.
  first_member is the first of COST consecutive slot numbers (0 unless booked).
]]
--- @include "log"

local log, meta, flight = KEYS[1], KEYS[2], KEYS[3]
local cost = tonumber(ARGV[1])
local max_delay = ARGV[2]
local hold = tonumber(ARGV[3])
local retain = tonumber(ARGV[4])
local defer = ARGV[5] == '1'
local max_hold = tonumber(ARGV[6])
local rule_count = tonumber(ARGV[7])
local settle_at = 8 + 2 * rule_count

local now = vt_now()
local now_ms = math.ceil(now)

vt_settle(log, flight, settle_at + 1, tonumber(ARGV[settle_at]))
vt_overdue(log, flight, now, max_hold)
redis.call('ZREMRANGEBYSCORE', log, '-inf', now_ms - retain)

local size = redis.call('ZCARD', log)
local state = redis.call('HMGET', meta, 'last', 'pause')
local start_at = math.max(now_ms, tonumber(state[1] or 0))
local pause = tonumber(state[2] or 0)
local rule_index = -1
if pause > now_ms and pause >= start_at then
  start_at = pause
  rule_index = -2
end
local binding = nil
for r = 0, rule_count - 1 do
  local limit = tonumber(ARGV[8 + 2 * r])
  local window = tonumber(ARGV[9 + 2 * r])
  local index = size - limit + cost - 1
  if index >= 0 then
    local entry = redis.call('ZRANGE', log, index, index, 'WITHSCORES')
    local score = tonumber(entry[2])
    if score + window > start_at then
      start_at = score + window
      rule_index = r
      binding = entry
    end
  end
end

-- A slot at now_ms starts now (the clock read is rounded up); a later one is waited for in full.
local wait = 0
if start_at > now_ms then wait = math.ceil(start_at - now) end
if max_delay ~= 'inf' and wait > tonumber(max_delay) then
  return { 0, wait, start_at, rule_index, 0, now_ms, 0, 0 }
end
-- The slot waits for a call whose completion is not known yet: ask again once it likely is.
if defer and binding ~= nil and string.sub(binding[1], -1) ~= '!' then
  return { 2, wait, start_at, rule_index, 0, now_ms, 1, vt_retry_ms(tonumber(binding[2]) - now, wait) }
end

local seq = redis.call('HINCRBY', meta, 'seq', cost)
local score = start_at + hold
local args = {}
for i = 1, cost do
  args[2 * i - 1] = score
  args[2 * i] = seq - cost + i
end
redis.call('ZADD', log, unpack(args))
redis.call('ZADD', flight, unpack(args))
redis.call('HSET', meta, 'last', start_at)
vt_expire(log, meta, flight, now_ms, retain, pause, max_hold)

local tentative = 0
if binding ~= nil and string.sub(binding[1], -1) ~= '!' then tentative = 1 end
return { 1, wait, start_at, rule_index, seq - cost + 1, now_ms, tentative, 0 }
