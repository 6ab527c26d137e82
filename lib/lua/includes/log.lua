-- Shared helpers of the vendor-throttle scripts. Included by the loader where a script says
-- `--- @include "log"`; never loaded on its own.
--
-- A user key is two Redis keys sharing one hash tag (lib/keys.ts):
--   log   sorted set, one entry per slot; the score is the slot's release: while its call may still
--         be on its way to the vendor, START + MAX_HOLD (a bound); once the call completed, its
--         response time (never above the bound). So score <= now means known, score > now means
--         still in flight or booked ahead. A slot counts against {LIMIT, WINDOW} at t while
--         score + WINDOW > t.
--   meta  hash: pause = no start before this (ms), w = a decision is waiting for a completion,
--         h = no decision before this (ms): the key lost data, and processes put back their calls
--         (includes/check.lua), r = on a Cluster, the replication id of the Redis that took the
--         key's last booking (a failover since changes it: vt_replid; on a standalone Redis the
--         namespace's epoch names it once for every key), b:<WINDOW>:<BUCKET>:* = calls folded
--         into buckets (includes/buckets.lua)

-- The store clock: Redis TIME as fractional milliseconds.
local function vt_now()
  local time = redis.call('TIME')
  return tonumber(time[1]) * 1000 + tonumber(time[2]) / 1000
end

-- A slot scored above this at NOW was booked to start later: past the bound of a call started now
-- (its start rounded up) and a millisecond more (inspect.lua counts them apart, reset.lua keeps them).
local function vt_booked_ahead_above(now, max_hold)
  return math.ceil(now) + max_hold + 1
end

-- Key lifetimes. A key normally has a time to live. While Redis evicts under a volatile-* policy,
-- which picks only keys that have one, the namespace is kept: its index of kept keys exists (a
-- sorted set without a time to live: member = a key's name, score = when it may go, store clock
-- ms, and a sentinel '' at +inf), and every key a script sets a lifetime on is moved there (its
-- time to live removed, PERSIST). Batches delete the kept keys whose time has passed (vt_sweep),
-- and keep.lua gives them their times to live back once the evictions stop. Each script that sets
-- lifetimes calls vt_kept with the index's name first (nil on a Cluster, where a script reaches
-- one slot: keys there always have a time to live).
local VT_KEPT = nil

-- The namespace's mark (a standalone Redis), a hash: `m` = until when (store clock ms) some key of
-- the namespace may have a vendor pause, a hold or a waiting list in its meta; `b` = until when some
-- key may have buckets that count (includes/buckets.lua). Decisions and completions read a key's
-- meta only while the mark lies ahead of them (`b` for a bucketed rule set), so a namespace where
-- nothing is set pays no meta read per call. Every writer of those fields raises it (vt_mark). It
-- has no time to live, like the epoch: only a loss of the whole store removes it, and the epoch
-- finds that first (a batch reads the mark only under a valid epoch). One key of a few bytes per
-- namespace, made with the epoch (epoch.lua); a namespace without one (its epoch made by an earlier
-- version) reads every key's meta. nil on a Cluster, where a script reaches one slot: there every
-- decision reads its key's meta.
local VT_MARK = nil

-- The namespace's keys a script was given: its index of kept keys, then its mark (none on a Cluster).
local function vt_namespace(index, mark)
  if index ~= nil and redis.call('EXISTS', index) == 1 then VT_KEPT = index end
  VT_MARK = mark
end

-- What this script raised the mark's fields to, and how many times: a batch reads the mark once,
-- and the decisions after an operation that raised it (a fold, a wait, a hold) must see it raised.
local VT_MARK_RAISED = { m = -math.huge, b = -math.huge, count = 0 }

-- Raises the namespace's mark FIELD ('m' by default, or 'b') to UNTIL_MS (store clock ms), never
-- lowering it. A field missing (read as "anything may be set": lua/batch.lua) is made with it.
local function vt_mark(until_ms, field)
  if VT_MARK == nil then return end
  field = field or 'm'
  until_ms = math.ceil(until_ms)
  if until_ms > VT_MARK_RAISED[field] then
    VT_MARK_RAISED[field] = until_ms
    VT_MARK_RAISED.count = VT_MARK_RAISED.count + 1
  end
  if tonumber(redis.call('HGET', VT_MARK, field) or 0) < until_ms then redis.call('HSET', VT_MARK, field, string.format('%d', until_ms)) end
end

-- KEY's life left at NOW (ms): as PTTL (-1: none, -2: no key), from the index when kept; and its
-- time to live as PTTL reads it.
local function vt_left(key, now)
  local ttl = redis.call('PTTL', key)
  if VT_KEPT ~= nil and ttl == -1 then
    local at = redis.call('ZSCORE', VT_KEPT, key)
    if at then return math.max(1, math.ceil(tonumber(at) - now)), ttl end
  end
  return ttl, ttl
end

-- Sets KEY's life to MS from NOW, as PEXPIRE with HOW: nil (always), 'GT' (only longer; a key
-- without one lives forever), 'LT' (only shorter), 'NX' (only where none). Returns 1 if set. A
-- kept namespace moves the key into its index: a key the policy cannot pick.
local function vt_expire(key, ms, now, how)
  ms = math.max(1, math.ceil(ms))
  if VT_KEPT == nil then
    if how == nil then return redis.call('PEXPIRE', key, ms) end
    return redis.call('PEXPIRE', key, ms, how)
  end
  local left, ttl = vt_left(key, now)
  if ttl == -2 then return 0 end
  if ttl >= 0 then redis.call('PERSIST', key) end
  local set = how == nil or (how == 'NX' and left == -1) or (how == 'GT' and left ~= -1 and ms > left) or (how == 'LT' and (left == -1 or ms < left))
  if not set then
    -- Moved out of its time to live all the same: as long as it had.
    if ttl >= 0 then redis.call('ZADD', VT_KEPT, math.ceil(now) + ttl, key) end
    return 0
  end
  redis.call('ZADD', VT_KEPT, math.ceil(now) + ms, key)
  return 1
end

-- Makes KEY live at least TTL_MS more from NOW: never shortens a lifetime. A key that does not
-- exist is left alone. A kept namespace moves the key into its index whatever its life left.
local function vt_keep(key, ttl_ms, now)
  local left = vt_left(key, now)
  if VT_KEPT ~= nil then
    if left ~= -2 then vt_expire(key, math.max(left, ttl_ms), now) end
  elseif left == -1 or (left >= 0 and left < ttl_ms) then
    vt_expire(key, ttl_ms, now)
  end
end

-- In a kept namespace, moves KEY into the index if it still has a time to live (set before the
-- namespace was kept): the policy could pick it. Every key a batch opens goes through here.
local function vt_take_in(key, now)
  local ttl = redis.call('PTTL', key)
  if ttl >= 0 then
    redis.call('PERSIST', key)
    redis.call('ZADD', VT_KEPT, 'GT', math.ceil(now) + ttl, key)
  end
end

-- Deletes kept keys whose time has passed (as their times to live would have), at least 32 and as
-- many as MORE (the keys the batch opened), so that the index never grows behind the batches. A key
-- given a time to live meanwhile (by a process of an earlier version) is left to it.
local function vt_sweep(now, more)
  local gone = redis.call('ZRANGEBYSCORE', VT_KEPT, '-inf', math.floor(now), 'LIMIT', 0, math.max(32, more))
  if #gone == 0 then return end
  for _, key in ipairs(gone) do
    if redis.call('PTTL', key) == -1 then redis.call('DEL', key) end
  end
  redis.call('ZREM', VT_KEPT, unpack(gone))
end

-- The replication id of this Redis (INFO replication): a replica promoted takes a new one, and so
-- does a Redis restarted without its data. '' where INFO is not allowed.
local VT_REPLID = nil
local function vt_replid()
  -- Read once per script run: INFO builds its whole section each time.
  if VT_REPLID == nil then
    local info = redis.pcall('INFO', 'replication')
    VT_REPLID = type(info) == 'string' and (string.match(info, 'master_replid:(%x+)') or '') or ''
  end
  return VT_REPLID
end

-- Whether an epoch VALUE ('<random>@<replid>:<ready>', epoch.lua) was created by another Redis than
-- this one (REPLID): a failover since. Unknown on either side ('' where INFO is denied): no.
local function vt_epoch_moved(value, replid)
  local created_by = string.match(value, '@(%x*):%d+$') or ''
  return replid ~= '' and created_by ~= '' and created_by ~= replid
end

-- The namespace's epoch (see epoch.lua): EPOCH_KEY must hold EXPECTED, the value the caller knows,
-- created by this Redis. A store that lost its data has no epoch, or a newer one; one promoted from
-- a replica holds one that names its former master. Returns 'lost' then, else the time (ms) before
-- which nothing may be decided while live processes put back what they know (0 when no check was
-- asked for: EPOCH_KEY nil), and whether the epoch names its Redis (an epoch of an earlier version
-- does not: each key then names the Redis that took its last booking, meta `r`).
local function vt_epoch(epoch_key, expected)
  if epoch_key == nil then return 0, false end
  local value = redis.call('GET', epoch_key)
  if value ~= expected or vt_epoch_moved(value, vt_replid()) then return 'lost', false end
  return tonumber(string.match(value, ':(%d+)$')) or 0, string.find(value, '@', 1, true) ~= nil
end

-- The encoded user key of LOG ('<prefix>:<name>:{<key>}:log', or '<prefix>:<name>:{<name>}:<key>:log'
-- when the throttle's name is the hash tag): the message that wakes a process waiting on it.
-- Encoded keys hold no braces (lib/keys.ts).
local function vt_user_key(log)
  return string.match(log, '{([^{}]*)}:log$') or string.match(log, '}:([^{}]*):log$')
end

-- Holds a key: no decision on it before GRACE ms from now (meta `h`), never shortening a hold.
-- meta then lives at least as long as LOG: under an eviction policy that takes the shortest time to
-- live first (volatile-ttl), the hold must not go before the log it protects.
local function vt_hold(log, meta, now, grace)
  local hold = math.ceil(now + grace)
  if hold > tonumber(redis.call('HGET', meta, 'h') or 0) then
    redis.call('HSET', meta, 'h', hold)
    vt_mark(hold)
    vt_keep(meta, math.max(hold - now, (vt_left(log, now))), now)
  end
end

-- A key whose last booking was taken by another Redis than this one (meta `r`, TAKEN_BY, against
-- REPLID: a failover since, maybe to a replica that missed writes) is held for GRACE ms, so that
-- the processes that know calls on it put them back first, and names this Redis from now on.
-- Returns whether it was. Unknown on either side ('' or none): no.
local function vt_failed_over(log, meta, taken_by, replid, now, grace)
  if replid == '' or not taken_by or taken_by == replid then return false end
  vt_hold(log, meta, now, grace)
  redis.call('HSET', meta, 'r', replid)
  return true
end

-- Slots up to TOP (a score) left LOG though they still count (taken out by a pause, or a lesson):
-- meta `f` says so, as a fold's does, so that a process whose newest slot (its witness) was one of
-- them does not take the key for lost (includes/check.lua). Meta lives as long as the log.
local function vt_took_out(log, meta, top, now)
  top = math.ceil(top)
  if tonumber(redis.call('HGET', meta, 'f') or 0) < top then redis.call('HSET', meta, 'f', string.format('%d', top)) end
  local ttl = redis.call('PTTL', log)
  if ttl > 0 then vt_keep(meta, ttl, now) end
end
