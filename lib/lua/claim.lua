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

  A reservation of several keys (a call that counts in each, `ReserveRequest.also`) is claimed in
  all at once: its members are the same in every key, each key keeps its own POINTER keys, and its
  mark is the first member's in the first key. Each dependency names its key (PART).

  KEYS[1 .. 2N]     each key's log (sorted set of the key's slots, includes/log.lua) and meta (hash
                    of the key: `pause`, a vendor pause; `h`, a hold after a loss)
  KEYS[2N+1 ..]     per key, the POINTER key of each reserved member, '<meta>:claimed:<member>', in
                    the members' order (ascending: the first key's first is the reservation's
                    mark); then that of each dependency, in its key
  ARGV[1]  BOUND    the reserved slots' score
  ARGV[2]  START    their start, as the token says
  ARGV[3]  GRACE    this process's reservationGraceMs
  ARGV[4]  HOLD     this process's maxHoldMs
  ARGV[5]  N        the number of keys
  ARGV[6]  COST     the number of slots
  ARGV[7]  DEPS     the number of dependencies
  ARGV[8]  GIVE     '1': no call starts; the reserved slots found leave the log and the reservation
                    is marked used (its own process gives it back: an aborted call)
  ARGV[9]  EPOCH    the namespace's epoch the caller knows ('' = no check; else its key is the last
                    of KEYS), as a batch's (lua/batch.lua)
  ARGV[10] RECOVERY the caller's recovery graceMs (0: recovery off): where the epoch cannot tell a
                    failover (none given, as on a Cluster, or one that names no Redis), a key whose
                    meta `r` names another Redis is held this long, as a decision holds it; then N RETAIN
                    (each key's history kept, ms, at least its longest window), COST reserved
                    members, COST members of the call, and DEPS triples MEMBER, WINDOW, PART (the
                    index of its key, from 0)
  Only members whose number is at least RESERVED (a reservation's, lib/stores/redis-store.ts) are
  taken: a claim cannot take the slot of a call a process booked for itself.

  Returns { STATUS, NOW_MS, WAIT_MS } (CODES.claim): STARTED, EARLY (its slots start in WAIT_MS, a
  dependency's window ends then, or the epoch's grace or a key's hold does: live processes put back
  their calls, their claims' marks with them; nothing changed), EPOCH_CHANGED (the store lost its data, or failed
  over, since the caller knew its epoch: nothing was done), LATE (past BOUND - HOLD: the slots count to
  their bound), USED (claimed before), MOVED (none of the slots is there; or some are, or a key is
  paused, or a dependency will not have released in time: those leave the logs, and the
  reservation is marked used).
]]
--- @include "log"

local bound, token_start, grace, hold = tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3]), tonumber(ARGV[4])
local n, cost, dep_count, give = tonumber(ARGV[5]), tonumber(ARGV[6]), tonumber(ARGV[7]), ARGV[8] == '1'
local retains_at = 10
local members_at = retains_at + n
local started_at, deps_at = members_at + cost, members_at + 2 * cost
local pointers_at = 2 * n
local now = vt_now()
local now_ms = math.ceil(now)
local start = math.max(token_start, bound - hold - grace)
local last = bound - hold

local mark = KEYS[pointers_at + 1]
if redis.call('EXISTS', mark) == 1 then return { VT_CLAIM_USED, now_ms, 0 } end
-- A store that lost its data (or a replica promoted that missed writes) may have lost the mark of
-- a claim made before: nothing is claimed until the processes have put back what they know.
local ready, epoch_names_redis = vt_epoch(ARGV[9] ~= '' and KEYS[#KEYS] or nil, ARGV[9])
if ready == 'lost' then return { VT_CLAIM_EPOCH_CHANGED, now_ms, 0 } end
if not give and ready > now then return { VT_CLAIM_EARLY, now_ms, math.ceil(ready - now) } end
-- A key held after a loss, or found failed over here (includes/log.lua, vt_failed_over): the claim
-- waits while the processes put back their calls on it, and their claims' marks.
local recovery_grace = tonumber(ARGV[10])
for k = 1, n do
  local log, meta = KEYS[2 * k - 1], KEYS[2 * k]
  local held, taken_by = unpack(redis.call('HMGET', meta, 'h', 'r'))
  if not epoch_names_redis and recovery_grace > 0 and vt_failed_over(log, meta, taken_by, vt_replid(), now, recovery_grace) then
    held = math.ceil(now + recovery_grace)
  end
  if not give and tonumber(held or 0) > now then return { VT_CLAIM_EARLY, now_ms, math.ceil(tonumber(held) - now) } end
end
if not give and now < start then return { VT_CLAIM_EARLY, now_ms, math.ceil(start - now) } end
if not give and now > last then return { VT_CLAIM_LATE, now_ms, 0 } end

-- The end the reserved members' names carry: the hash of the dependencies' list (vt_deps,
-- vt_deps_suffix).
local suffix = ''
if dep_count > 0 then
  local parts = {}
  for j = 1, dep_count do
    local at = deps_at + 3 * (j - 1)
    local window = ARGV[at + 2]
    if ARGV[at + 3] ~= '0' then window = window .. '@' .. ARGV[at + 3] end
    parts[2 * j - 1], parts[2 * j] = ARGV[at + 1], window
  end
  local text = table.concat(parts, ' ')
  -- A reservation of several keys: its keys in order too (a token with them reordered names no slot).
  if n > 1 then
    local names = {}
    for k = 1, n do names[k] = vt_user_key(KEYS[2 * k - 1]) end
    text = text .. '|' .. table.concat(names, ' ')
  end
  suffix = '~' .. string.sub(redis.sha1hex(text), 1, 16)
end
local named = {}
for i = 1, cost do
  local member = ARGV[members_at + i]
  local number = tonumber(string.match(member, '^%d+'))
  local ours = dep_count > 0 and string.sub(member, -#suffix) == suffix or dep_count == 0 and not string.find(member, '~', 1, true)
  if ours and number ~= nil and number >= VT_CLAIM_RESERVED then named[#named + 1] = member end
end
-- Per key, the reserved members still there at the bound.
local present, found, whole = {}, 0, true
for k = 1, n do
  local log = KEYS[2 * k - 1]
  present[k] = {}
  for _, member in ipairs(named) do
    local score = redis.call('ZSCORE', log, member)
    if score and tonumber(score) == bound then present[k][#present[k] + 1] = member end
  end
  found = found + #present[k]
  if #present[k] < cost then whole = false end
end
if found == 0 then return { VT_CLAIM_MOVED, now_ms, 0 } end

local startable = not give and whole
for k = 1, n do
  if not startable then break end
  if tonumber(redis.call('HGET', KEYS[2 * k], 'pause') or 0) > now then startable = false end
end
if startable then
  -- Each dependency's release in its key, followed to the slot that took its place where it was claimed.
  local ready = start
  for j = 1, dep_count do
    local at = deps_at + 3 * (j - 1)
    local member, log = ARGV[at + 1], KEYS[2 * tonumber(ARGV[at + 3]) + 1]
    local score = redis.call('ZSCORE', log, member)
    if not score then
      local to = redis.call('GET', KEYS[pointers_at + n * cost + j])
      if to then score = redis.call('ZSCORE', log, to) end
    end
    if score then
      score = tonumber(score)
      if score > now_ms then
        ready = math.huge
        break
      end
      ready = math.max(ready, score + tonumber(ARGV[at + 2]))
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
  for k = 1, n do
    local log = KEYS[2 * k - 1]
    -- The pointers last until the call's slots count no longer: a dependency followed then is released.
    local life = math.ceil(math.max(last - now + 1, hold + tonumber(ARGV[retains_at + k])))
    for i = 1, cost do
      local member = ARGV[started_at + i]
      redis.call('ZADD', log, score, member)
      redis.call('SET', KEYS[pointers_at + (k - 1) * cost + i], member, 'PX', life)
    end
    redis.call('ZREM', log, unpack(present[k]))
  end
  return { VT_CLAIM_STARTED, now_ms, 0 }
end
redis.call('SET', mark, '', 'PX', math.max(1, math.ceil(last - now) + 1))
for k = 1, n do
  if #present[k] > 0 then redis.call('ZREM', KEYS[2 * k - 1], unpack(present[k])) end
end
return { VT_CLAIM_MOVED, now_ms, 0 }
