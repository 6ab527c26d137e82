--[[
  claim: a call starts now on slots reserved earlier (`Throttle.reserve`, a decision with
  `reserved`), by this process or another (docs/design.md, "Reservations"). The reserved slots are
  scored at their bound, START + the reserving throttle's maxHoldMs + GRACE, and counted like any
  slot until then. A claim at or after START and at most GRACE later takes them out of the log and
  books the call's own slots in their place, scored to now + MAX_HOLD (the bound of a call started
  now, settled by its completion as any call's). A call that starts late starts by then, so it
  reaches the vendor within the reserved slots' bound.

  A reservation is claimed at most once: the first claim past its START leaves CLAIMED (a key of
  the key's hash tag, lasting until the grace ends); a claim that finds it answers USED. Whatever
  the claims race, only the first finds the reserved members, and a claim that finds them gone
  books nothing here (MOVED: the caller books a slot again through the log).

  KEYS[1]  log      sorted set of the key's slots (includes/log.lua)
  KEYS[2]  meta     hash of the key: `pause` (a vendor pause), `h` (a hold after a loss)
  KEYS[3]  claimed  the reservation's mark, '<meta>:claimed:<first member>'
  ARGV[1]  BOUND    the reserved slots' score
  ARGV[2]  GRACE    ms after START within which they can be claimed
  ARGV[3]  HOLD     the claiming throttle's maxHoldMs (START = BOUND - HOLD - GRACE)
  ARGV[4]  COST     the number of slots; then COST reserved members, then COST members of the call
  Only members whose number is at least RESERVED (a reservation's, lib/stores/redis-store.ts) are
  taken: a claim cannot take the slot of a call booked by a process for itself.

  Returns { STATUS, NOW_MS, WAIT_MS } (CODES.claim): STARTED, EARLY (its slots start in WAIT_MS;
  nothing changed), LATE (the grace is over: the slots count to their bound), USED (claimed
  before), MOVED (slots gone, or the key paused or held: what is left of them leaves the log).
]]
--- @include "log"

local log, meta, claimed = KEYS[1], KEYS[2], KEYS[3]
local bound, grace, hold, cost = tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3]), tonumber(ARGV[4])
local now = vt_now()
local now_ms = math.ceil(now)
local start = bound - hold - grace

if redis.call('EXISTS', claimed) == 1 then return { VT_CLAIM_USED, now_ms, 0 } end
if now < start then return { VT_CLAIM_EARLY, now_ms, math.ceil(start - now) } end
if now > start + grace then return { VT_CLAIM_LATE, now_ms, 0 } end
redis.call('SET', claimed, '1', 'PX', math.max(1, math.ceil(start + grace - now) + 1))

local present = {}
for i = 1, cost do
  local member = ARGV[4 + i]
  local number = tonumber(string.match(member, '^%d+'))
  local score = number ~= nil and number >= VT_CLAIM_RESERVED and redis.call('ZSCORE', log, member)
  if score and tonumber(score) == bound then present[#present + 1] = member end
end
if #present > 0 then redis.call('ZREM', log, unpack(present)) end

local pause, held = unpack(redis.call('HMGET', meta, 'pause', 'h'))
if #present < cost or tonumber(pause or 0) > now or tonumber(held or 0) > now then return { VT_CLAIM_MOVED, now_ms, 0 } end
local score = now_ms + hold
for i = 1, cost do
  redis.call('ZADD', log, score, ARGV[4 + cost + i])
end
return { VT_CLAIM_STARTED, now_ms, 0 }
