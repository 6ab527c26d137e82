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

  Dependencies (includes/decide.lua, vt_deps): slots the reservation took to be released by its
  start. The call starts only once each has released at least its WINDOW ago: its score is known (at
  or before now) and that far back. A dependency claimed since is followed to the slot that took its
  place (its POINTER key); one gone from the log otherwise released long enough ago, or never ran (a
  pause or a lower learned limit took it out; it books again after this reservation). The
  reservation's members end with the hash of the dependencies' list, so a token with other
  dependencies names no reserved slot.

  A reservation is claimed at most once: a claim that finds every reserved member at BOUND leaves
  a mark under each member's POINTER key (lasting until the claims end, and for a started call
  until its slots count no longer: the member of the slot that took its place); a claim that finds
  the first one's answers USED. A claim that finds none of them books nothing and marks nothing
  (MOVED: a vendor pause, a lower learned limit or a loss took them out, or the token names no
  reservation): the caller books a slot as any call.

  KEYS[1]  log      sorted set of the key's slots (includes/log.lua)
  KEYS[2]  meta     hash of the key: `pause` (a vendor pause), `h` (a hold after a loss)
  KEYS[3 ..]        the POINTER key of each reserved member, '<meta>:claimed:<member>', in the
                    members' order (ascending: the first is the reservation's mark), then that of
                    each dependency
  ARGV[1]  BOUND    the reserved slots' score
  ARGV[2]  START    their start, as the token says
  ARGV[3]  GRACE    this process's reservationGraceMs
  ARGV[4]  HOLD     this process's maxHoldMs
  ARGV[5]  RETAIN   the key's history kept (ms, at least its longest window)
  ARGV[6]  COST     the number of slots
  ARGV[7]  DEPS     the number of dependencies
  ARGV[8]  GIVE     '1': no call starts; the reserved slots found leave the log and the reservation
                    is marked used (its own process gives it back: an aborted call); then COST
                    reserved members, COST members of the call, and DEPS pairs MEMBER, WINDOW
  Only members whose number is at least RESERVED (a reservation's, lib/stores/redis-store.ts) are
  taken: a claim cannot take the slot of a call a process booked for itself.

  Returns { STATUS, NOW_MS, WAIT_MS } (CODES.claim): STARTED, EARLY (its slots start in WAIT_MS, or
  a dependency's window ends then; nothing changed), LATE (past BOUND - HOLD: the slots count to
  their bound), USED (claimed before), MOVED (none of the slots is there; or some are, or the key is
  paused or held, or a dependency will not have released in time: those leave the log, and the
  reservation is marked used).
]]
--- @include "log"

local log, meta = KEYS[1], KEYS[2]
local bound, token_start, grace, hold, retain = tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3]), tonumber(ARGV[4]), tonumber(ARGV[5])
local cost, dep_count, give = tonumber(ARGV[6]), tonumber(ARGV[7]), ARGV[8] == '1'
local members_at, started_at, deps_at = 8, 8 + cost, 8 + 2 * cost
local now = vt_now()
local now_ms = math.ceil(now)
local start = math.max(token_start, bound - hold - grace)
local last = bound - hold

if redis.call('EXISTS', KEYS[3]) == 1 then return { VT_CLAIM_USED, now_ms, 0 } end
if not give and now < start then return { VT_CLAIM_EARLY, now_ms, math.ceil(start - now) } end
if not give and now > last then return { VT_CLAIM_LATE, now_ms, 0 } end

-- The end the reserved members' names carry: the hash of the dependencies' list (vt_deps).
local suffix = ''
if dep_count > 0 then
  local parts = {}
  for j = 1, 2 * dep_count do parts[j] = ARGV[deps_at + j] end
  suffix = '~' .. string.sub(redis.sha1hex(table.concat(parts, ' ')), 1, 16)
end
local present = {}
for i = 1, cost do
  local member = ARGV[members_at + i]
  local number = tonumber(string.match(member, '^%d+'))
  local named = dep_count > 0 and string.sub(member, -#suffix) == suffix or dep_count == 0 and not string.find(member, '~', 1, true)
  local score = named and number ~= nil and number >= VT_CLAIM_RESERVED and redis.call('ZSCORE', log, member)
  if score and tonumber(score) == bound then present[#present + 1] = member end
end
if #present == 0 then return { VT_CLAIM_MOVED, now_ms, 0 } end

local pause, held = unpack(redis.call('HMGET', meta, 'pause', 'h'))
local startable = not give and #present == cost and tonumber(pause or 0) <= now and tonumber(held or 0) <= now
if startable then
  -- Each dependency's release, followed to the slot that took its place where it was claimed.
  local ready = start
  for j = 1, dep_count do
    local member = ARGV[deps_at + 2 * j - 1]
    local score = redis.call('ZSCORE', log, member)
    if not score then
      local to = redis.call('GET', KEYS[2 + cost + j])
      if to then score = redis.call('ZSCORE', log, to) end
    end
    if score then
      score = tonumber(score)
      if score > now_ms then
        ready = math.huge
        break
      end
      ready = math.max(ready, score + tonumber(ARGV[deps_at + 2 * j]))
    end
  end
  if ready > last then
    startable = false
  elseif ready > now then
    return { VT_CLAIM_EARLY, now_ms, math.ceil(ready - now) }
  end
end

if startable then
  local score = now_ms + hold
  -- The pointers last until the call's slots count no longer: a dependency followed then is released.
  local life = math.ceil(math.max(last - now + 1, hold + retain))
  for i = 1, cost do
    local member = ARGV[started_at + i]
    redis.call('ZADD', log, score, member)
    redis.call('SET', KEYS[2 + i], member, 'PX', life)
  end
  redis.call('ZREM', log, unpack(present))
  return { VT_CLAIM_STARTED, now_ms, 0 }
end
redis.call('SET', KEYS[3], '', 'PX', math.max(1, math.ceil(last - now) + 1))
redis.call('ZREM', log, unpack(present))
return { VT_CLAIM_MOVED, now_ms, 0 }
