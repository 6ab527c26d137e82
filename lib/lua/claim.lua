--[[
  claim: a call starts now on slots reserved earlier (`Throttle.reserve`, a decision with
  `reserved`), by this process or another (docs/design.md, "Reservations"). The reserved slots are
  scored at their bound, their start + the reserving throttle's maxHoldMs + grace, and counted like
  any slot until then. A claim from their start until BOUND - HOLD (so that the call reaches the
  vendor by their bound) books the call's own slots, scored now + HOLD (the bound of a call started
  now, settled by its completion as any call's), and then takes the reserved ones out: the log
  never empties on the way, so it keeps its time to live.

  The start is the later of START (the token's) and BOUND - HOLD - GRACE (what this process's
  settings give): a token altered to an earlier start, or a process with a longer hold or grace
  than the reserving one, cannot start the call early.

  A reservation is claimed at most once: a claim that finds every reserved member at BOUND leaves
  CLAIMED (a key of the key's hash tag, named by the smallest member, lasting until the claims end);
  a claim that finds it answers USED. A claim that finds none of them books nothing and marks
  nothing (MOVED: a vendor pause, a lower learned limit or a loss took them out, or the token names
  no reservation): the caller books a slot as any call.

  KEYS[1]  log      sorted set of the key's slots (includes/log.lua)
  KEYS[2]  meta     hash of the key: `pause` (a vendor pause), `h` (a hold after a loss)
  KEYS[3]  claimed  the reservation's mark, '<meta>:claimed:<smallest member>'
  ARGV[1]  BOUND    the reserved slots' score
  ARGV[2]  START    their start, as the token says
  ARGV[3]  GRACE    this process's reservationGraceMs
  ARGV[4]  HOLD     this process's maxHoldMs
  ARGV[5]  COST     the number of slots; then COST reserved members, then COST members of the call
  Only members whose number is at least RESERVED (a reservation's, lib/stores/redis-store.ts) are
  taken: a claim cannot take the slot of a call a process booked for itself.

  Returns { STATUS, NOW_MS, WAIT_MS } (CODES.claim): STARTED, EARLY (its slots start in WAIT_MS;
  nothing changed), LATE (past BOUND - HOLD: the slots count to their bound), USED (claimed
  before), MOVED (none of the slots is there; or some are, or the key is paused or held: those
  leave the log, and the reservation is marked used).
]]
--- @include "log"

local log, meta, claimed = KEYS[1], KEYS[2], KEYS[3]
local bound, token_start, grace, hold, cost = tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3]), tonumber(ARGV[4]), tonumber(ARGV[5])
local now = vt_now()
local now_ms = math.ceil(now)
local start = math.max(token_start, bound - hold - grace)
local last = bound - hold

if redis.call('EXISTS', claimed) == 1 then return { VT_CLAIM_USED, now_ms, 0 } end
if now < start then return { VT_CLAIM_EARLY, now_ms, math.ceil(start - now) } end
if now > last then return { VT_CLAIM_LATE, now_ms, 0 } end

local present = {}
for i = 1, cost do
  local member = ARGV[5 + i]
  local number = tonumber(string.match(member, '^%d+'))
  local score = number ~= nil and number >= VT_CLAIM_RESERVED and redis.call('ZSCORE', log, member)
  if score and tonumber(score) == bound then present[#present + 1] = member end
end
if #present == 0 then return { VT_CLAIM_MOVED, now_ms, 0 } end
redis.call('SET', claimed, '1', 'PX', math.max(1, math.ceil(last - now) + 1))

local pause, held = unpack(redis.call('HMGET', meta, 'pause', 'h'))
if #present == cost and tonumber(pause or 0) <= now and tonumber(held or 0) <= now then
  local score = now_ms + hold
  for i = 1, cost do
    redis.call('ZADD', log, score, ARGV[5 + cost + i])
  end
  redis.call('ZREM', log, unpack(present))
  return { VT_CLAIM_STARTED, now_ms, 0 }
end
redis.call('ZREM', log, unpack(present))
return { VT_CLAIM_MOVED, now_ms, 0 }
