-- Shared helpers of the vendor-throttle scripts. Included by the loader where a script says
-- `--- @include "log"`; never loaded on its own.

-- The store clock: Redis TIME as fractional milliseconds.
local function vt_now()
  local time = redis.call('TIME')
  return tonumber(time[1]) * 1000 + tonumber(time[2]) / 1000
end

-- Applies settlements ARGV[from], ARGV[from+1], ... (count pairs of member, releaseAt).
-- An empty releaseAt removes the slot (the call never started); a number moves the slot's score
-- to the call's completion time. Slots that already expired are left alone (ZADD XX).
-- Returns the largest releaseAt applied, or 0.
local function vt_settle(log, from, count)
  local latest = 0
  for i = 0, count - 1 do
    local member = ARGV[from + 2 * i]
    local release = ARGV[from + 2 * i + 1]
    if release == '' then
      redis.call('ZREM', log, member)
    else
      redis.call('ZADD', log, 'XX', release, member)
      local at = tonumber(release)
      if at > latest then latest = at end
    end
  end
  return latest
end

-- Keeps both keys alive until the latest score in the log is older than the history kept, and
-- at least until a vendor pause (meta field `pause`, ms) is over.
local function vt_expire(log, meta, now_ms, retain, pause)
  local top = redis.call('ZRANGE', log, -1, -1, 'WITHSCORES')
  local until_ms = pause or 0
  if top[2] ~= nil then until_ms = math.max(until_ms, tonumber(top[2]) + retain) end
  if until_ms == 0 then return end
  local ttl = math.ceil(until_ms - now_ms)
  if ttl < 1 then ttl = 1 end
  redis.call('PEXPIRE', log, ttl)
  redis.call('PEXPIRE', meta, ttl)
end
