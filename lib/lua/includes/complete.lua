--[[
  complete: the calls of one key that completed, or never started. A completion lowers its slot's
  score to the response time (ZADD XX LT: a score only ever goes down, so a decision that relied
  on it stays valid); a call that never started (aborted, closed) leaves the log. When processes
  wait for a completion on the key (meta `w`), one message on the namespace's channel wakes the
  oldest of them (includes/waiters.lua).

  A[I ..]  KEY   the encoded user key, the message
           N     followed by N pairs: MEMBER, RELEASE_AT (ms, store clock; '' = remove)

  Replies 1 when a waiting process was woken, else 0.
]]
local function vt_complete(log, meta, channel, a, i)
  local key = a[i]
  local count = tonumber(a[i + 1])
  -- The latest completion is a time that has passed (no TIME needed): waiting entries long past
  -- theirs belong to processes that stopped asking, and are passed over.
  local latest = 0
  for e = 0, count - 1 do
    local member = a[i + 2 + 2 * e]
    local release = a[i + 3 + 2 * e]
    if release == '' then
      redis.call('ZREM', log, member)
    else
      redis.call('ZADD', log, 'XX', 'LT', release, member)
      latest = math.max(latest, tonumber(release))
    end
  end
  local waiting = vt_waiters_parse(redis.call('HGET', meta, 'w'))
  vt_waiters_wake(waiting, channel, key, latest)
  return #waiting > 0 and 1 or 0, i + 2 + 2 * count
end
