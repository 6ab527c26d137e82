--[[
  confirm: checks, when a slot booked on an estimate is due, that it still keeps every rule with
  what is known now. Books nothing. See docs/design.md §4.

  First moves every slot past its estimate and not settled to count from now (vt_overdue: such a
  call is still on its way), then counts, for each rule, the slots booked before this one (lower
  slot numbers) whose score + WINDOW > START.

  KEYS[1]  log   sorted set of slots (see reserve.lua)
  KEYS[2]  meta  hash of the key
  KEYS[3]  flight  sorted set of the slots not settled yet (see reserve.lua)
  ARGV[1]  START     the slot's start (ms, store clock)
  ARGV[2]  FIRST     the slot's first member number
  ARGV[3]  COST      slots the call holds
  ARGV[4]  MAX_HOLD  ms a call may stay in flight at most
  ARGV[5]  R, number of rules, followed by R pairs: LIMIT, WINDOW (ms)

  Returns 1 when the slot keeps every rule, 0 when it must be booked again.
]]
--- @include "log"

local log, flight = KEYS[1], KEYS[3]
local start = tonumber(ARGV[1])
local first = tonumber(ARGV[2])
local cost = tonumber(ARGV[3])
local max_hold = tonumber(ARGV[4])
local rule_count = tonumber(ARGV[5])
local now = vt_now()
vt_overdue(log, flight, now, max_hold)

local longest = 0
for r = 0, rule_count - 1 do longest = math.max(longest, tonumber(ARGV[7 + 2 * r])) end
local entries = redis.call('ZRANGEBYSCORE', log, '(' .. (start - longest), '+inf', 'WITHSCORES')

for r = 0, rule_count - 1 do
  local limit = tonumber(ARGV[6 + 2 * r])
  local window = tonumber(ARGV[7 + 2 * r])
  local counted = 0
  for i = 1, #entries, 2 do
    local member = entries[i]
    local number = tonumber((string.gsub(member, '!$', '')))
    if number < first and tonumber(entries[i + 1]) + window > start then counted = counted + 1 end
  end
  if counted > limit - cost then return 0 end
end
return 1
