--[[
  complete: the calls of one key that completed, or never started. A completion lowers its slot's
  score to the response time (ZADD XX LT: a score only ever goes down, so a decision that relied
  on it stays valid); a call that never started (aborted, closed) leaves the log. When processes
  wait for a completion on the key (meta `w`), one message on its own channel wakes the first of
  them (includes/waiters.lua).

  A[I ..]  N   (1 or more) followed by N pairs: NUMBER (the member is NUMBER followed by TAG),
               RELEASE_AT (ms, store clock; -1 = remove): both as text (their digits) or numbers
               (lua/batch.lua, FIELDS), passed to ZADD as they come
  MARKED   the namespace's mark (includes/log.lua): no process waits on the key past it, so the
           waiting list is read only when a completion is not later than the mark

  Returns the index in A after its arguments.
]]
local function vt_complete(log, meta, tag, channel, a, i, marked)
  local count = tonumber(a[i])
  -- Several calls of the key: one call alone, the usual completion, is written by lua/batch.lua's
  -- loop itself (a function call less per completion: 0.2 µs of 6 on a replayed cost run).
  -- The latest completion is a time that has passed (no TIME needed): waiting entries long past
  -- theirs belong to processes that stopped asking, and are passed over.
  local latest = 0
  local scored = {}
  for e = 0, count - 1 do
    local member = a[i + 1 + 2 * e] .. tag
    local release = a[i + 2 + 2 * e]
    if release == -1 then
      redis.call('ZREM', log, member)
    else
      scored[#scored + 1] = release
      scored[#scored + 1] = member
      latest = math.max(latest, tonumber(release))
    end
  end
  -- The key's completions in one ZADD, in chunks (unpack takes a few thousand values at most).
  for from = 1, #scored, 1000 do
    redis.call('ZADD', log, 'XX', 'LT', unpack(scored, from, math.min(#scored, from + 999)))
  end
  if marked >= latest then
    local value = redis.call('HGET', meta, 'w')
    if value then vt_waiters_wake(vt_waiters_parse(value), channel, vt_user_key(log), latest) end
  end
  return i + 1 + 2 * count
end

-- leave: this process no longer waits on the key (its waiting calls went away): it leaves the
-- key's waiting list, which wakes the next process if it was the first.
local function vt_leave(log, meta, tag, channel)
  local value = redis.call('HGET', meta, 'w')
  if value then vt_waiters_update(meta, value, tag, 0, 0, channel, vt_user_key(log), false) end
end

--[[
  tidy: a key whose calls this process has all completed (its throttle closes) lives no longer than
  its slots count. Each booking made the log live until the slot's bound (start + MAX_HOLD) plus
  RETAIN (never shortened: PEXPIRE GT); completions lowered the scores since. The log and meta now
  expire RETAIN after the highest score left (another process's call still in flight keeps its
  bound), meta no earlier than its pause, its hold, the calls a fold moved into its buckets (`f`),
  or the lapse of what it learned from its vendor (`l`, includes/learned.lua). PEXPIRE LT: never lengthened. The log is
  left as it is while another process has slots there that still count: that process may rely on
  the life it gave the log (decide.lua, vt_key_close), and only its own bookings set it again.
]]
local function vt_tidy(log, meta, tag, now, retain)
  local top = redis.call('ZRANGE', log, -1, -1, 'WITHSCORES')
  local until_ms = 0
  if top[2] then
    until_ms = tonumber(top[2]) + retain
    local counting = redis.call('ZRANGE', log, math.floor(now) - retain, '+inf', 'BYSCORE', 'LIMIT', 0, 1001)
    local alone = #counting <= 1000
    for _, member in ipairs(counting) do
      if string.sub(member, -#tag) ~= tag then alone = false end
    end
    if alone then vt_expire(log, until_ms - now, now, 'LT') end
  end
  local fields = redis.call('HMGET', meta, 'pause', 'h', 'f', 'l')
  until_ms = math.max(until_ms, tonumber(fields[1]) or 0, tonumber(fields[2]) or 0, (tonumber(fields[3]) or -retain) + retain)
  -- What the key learned from its vendor stays until it lapses (includes/learned.lua).
  for _, entry in ipairs(vt_learned_parse(fields[4], now)) do until_ms = math.max(until_ms, entry[3]) end
  vt_expire(meta, until_ms - now, now, 'LT')
end
