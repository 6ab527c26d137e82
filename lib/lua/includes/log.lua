-- Shared helpers of the vendor-throttle scripts. Included by the loader where a script says
-- `--- @include "log"`; never loaded on its own.

-- The store clock: Redis TIME as fractional milliseconds.
local function vt_now()
  local time = redis.call('TIME')
  return tonumber(time[1]) * 1000 + tonumber(time[2]) / 1000
end

-- Applies settlements a[from], a[from+1], ... (count pairs of member, releaseAt).
-- An empty releaseAt removes the slot (the call never started); a number moves the slot's score
-- to the call's completion time and renames the member to <number>! (settled: the score is no
-- longer an estimate). Slots that already expired are left alone. Returns the latest completion
-- time applied (0 when none).
local function vt_settle(log, flight, a, from, count)
  local latest = 0
  for i = 0, count - 1 do
    local member = a[from + 2 * i]
    local release = a[from + 2 * i + 1]
    redis.call('ZREM', flight, member)
    if release == '' then
      redis.call('ZREM', log, member, member .. '!')
    elseif redis.call('ZSCORE', log, member) then
      -- Renamed by adding first: removing first could empty the log, which would take its time to
      -- live with it.
      redis.call('ZADD', log, release, member .. '!')
      redis.call('ZREM', log, member)
      latest = math.max(latest, tonumber(release))
    else
      redis.call('ZADD', log, 'XX', release, member .. '!')
      latest = math.max(latest, tonumber(release))
    end
  end
  return latest
end

-- A call that has not reported its completion by its estimate is still on its way (completions
-- are written as soon as they happen): its slot counts from now, until it completes or MAX_HOLD
-- after its estimate has passed, when it is taken to have reached the vendor long ago.
local function vt_overdue(log, flight, now, max_hold)
  local now_ms = math.ceil(now)
  local overdue = redis.call('ZRANGEBYSCORE', flight, '-inf', now, 'WITHSCORES')
  for i = 1, #overdue, 2 do
    if tonumber(overdue[i + 1]) + max_hold > now then
      redis.call('ZADD', log, 'XX', 'GT', now_ms, overdue[i])
    else
      redis.call('ZREM', flight, overdue[i])
    end
  end
end

-- When to ask again about a slot deferred on a call in flight: when the call's estimate is reached
-- (at least 5 ms), or, once the estimate has passed, after a quarter of the wait, between 5 ms and
-- 50 ms. Must match retryMs() in lib/decision.ts.
local function vt_retry_ms(in_flight_ms, wait)
  if in_flight_ms > 0 then return math.max(5, math.ceil(in_flight_ms)) end
  return math.min(50, math.max(5, math.ceil(wait / 4)))
end

-- Sets a key's time to live to TTL_MS (ms) when it has none (-1) or a shorter one: never shortens
-- it. A key that does not exist (-2) is left alone.
local function vt_keep(key, ttl_ms)
  local left = redis.call('PTTL', key)
  if left == -1 or (left >= 0 and left < ttl_ms) then redis.call('PEXPIRE', key, ttl_ms) end
end

-- Keeps the keys alive until the latest score in the log is older than the history kept, until a
-- call still in flight can no longer count (its estimate + MAX_HOLD + RETAIN), and until a vendor
-- pause (meta field `pause`, ms) is over; meta also until its last bucket no longer counts (the log
-- may be empty while meta holds a window of buckets). Each key is checked on its own time to live,
-- and none is ever shortened.
local function vt_expire(log, meta, flight, now_ms, retain, pause, max_hold)
  local until_ms = pause or 0
  local top = redis.call('ZRANGE', log, -1, -1, 'WITHSCORES')
  if top[2] ~= nil then until_ms = math.max(until_ms, tonumber(top[2]) + retain) end
  local latest = redis.call('ZRANGE', flight, -1, -1, 'WITHSCORES')
  if latest[2] ~= nil then until_ms = math.max(until_ms, tonumber(latest[2]) + max_hold + retain) end
  -- 'b:until': the latest time a bucket in meta counts until (written by vt_fold in ops.lua).
  local meta_until = math.max(until_ms, tonumber(redis.call('HGET', meta, 'b:until')) or 0)
  if meta_until > 0 then vt_keep(meta, math.max(1, math.ceil(meta_until - now_ms))) end
  if until_ms == 0 then return end
  local ttl = math.max(1, math.ceil(until_ms - now_ms))
  vt_keep(log, ttl)
  vt_keep(flight, ttl)
end

-- Keeps the keys alive until at least UNTIL_MS (store clock); FRESH: the caller created all three
-- (no log, slot number or pause before). Each booking extends them to cover its own call
-- (estimate + MAX_HOLD + RETAIN) and each late completion its own window, so the lifetime always
-- covers every slot that can still count. A key whose own time to live falls short of UNTIL_MS (or
-- that has none: a flight set or log emptied and written again) is extended by SLACK more, so that
-- the bookings that follow within it need no PEXPIRE. Never shortens a time to live set before.
local function vt_extend(log, meta, flight, now_ms, until_ms, slack, fresh)
  local ttl = math.ceil(until_ms - now_ms)
  local target = math.max(1, ttl + slack)
  if fresh then
    -- A key this decision created: none of the three has a time to live yet.
    redis.call('PEXPIRE', log, target)
    redis.call('PEXPIRE', meta, target)
    redis.call('PEXPIRE', flight, target)
    return
  end
  -- Each key on its own: they need not share one lifetime (meta outlives an emptied log while it
  -- holds buckets; a flight set emptied by its last completion comes back without one).
  for _, key in ipairs({ log, meta, flight }) do
    local left = redis.call('PTTL', key)
    if left == -1 or (left >= 0 and left < ttl) then redis.call('PEXPIRE', key, target) end
  end
end

-- The namespace's epoch (see epoch.lua): EPOCH_KEY must hold EXPECTED, the value the caller knows.
-- A store that lost its data has no epoch, or a newer one. Returns 'lost' when the value differs,
-- else the time (ms) before which nothing may be decided while live processes put back what they
-- know (0 when no check was asked for: EPOCH_KEY nil).
local function vt_epoch(epoch_key, expected)
  if epoch_key == nil then return 0 end
  local value = redis.call('GET', epoch_key)
  if value ~= expected then return 'lost' end
  return tonumber(string.match(value, ':(%d+)$')) or 0
end
