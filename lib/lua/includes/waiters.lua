-- The processes waiting for a completion on a key, in turn order: meta field `w`, a list of
-- "<tag>=<until>" separated by spaces (a process's member tag, and the time by which it asks again
-- on its own: its bound). A completion wakes the first alone (complete.lua); one that is served
-- and still waits goes to the end (vt_waiters_update); one that no longer waits leaves the list,
-- and wakes the next. An entry past its time by more than a second
-- belongs to a process that stopped asking (it crashed, or its calls went away): dropped.
-- Included after "log".

local function vt_waiters_parse(value)
  local out = {}
  if value then
    for tag, until_ms in string.gmatch(value, '(%S+)=(%d+)') do out[#out + 1] = { tag, tonumber(until_ms) } end
  end
  return out
end

local function vt_waiters_write(meta, list)
  if #list == 0 then
    redis.call('HDEL', meta, 'w')
    return
  end
  local parts = {}
  for k, w in ipairs(list) do parts[k] = w[1] .. '=' .. string.format('%d', w[2]) end
  redis.call('HSET', meta, 'w', table.concat(parts, ' '))
end

-- Wakes the first waiting process: one message, the key, on that process's channel (the
-- namespace's CHANNEL followed by its tag), so that no other process hears it. With NOW_MS (a time
-- known to have passed; 0: none), an entry more than a second past its time is passed over: its
-- process stopped asking.
local function vt_waiters_wake(list, channel, key, now_ms)
  for _, w in ipairs(list) do
    if w[2] + 1000 >= now_ms then
      redis.call('PUBLISH', channel .. w[1], key)
      return
    end
  end
end

-- After a decision of process TAG: UNTIL_MS > 0 keeps it in the list until then at least: at its
-- place if the decision SERVED none of its calls, else at the end (the processes that wait take
-- turns: round robin, one wake each); 0 takes it out (it no longer waits), waking the next if it was
-- the first; -1 (STAY: the process's other calls may still wait on the key) moves it to the end
-- with its time, if it is in the list, so that the next completion wakes the next process (a wake
-- is not passed on: two processes that cannot use one would pass it back and forth). Its time
-- stays what it was: its entry goes a second after it unless a decision that waits sets a later
-- one. Stale entries go. Writes meta only when the list changes (a process that waits again at its
-- place, with no later time, costs nothing more).
local function vt_waiters_update(meta, value, tag, until_ms, now_ms, channel, key, served)
  local list = vt_waiters_parse(value)
  local kept = {}
  local found = false
  local was_head = false
  local changed = false
  local mine = until_ms
  for _, w in ipairs(list) do
    if w[1] == tag then
      found = true
      was_head = #kept == 0
      if until_ms == -1 then
        found = false
        mine = w[2]
        -- Already last: no change.
        changed = changed or w ~= list[#list]
      elseif until_ms > 0 and not served then
        mine = math.max(w[2], until_ms)
        changed = changed or mine ~= w[2]
        kept[#kept + 1] = { tag, mine }
      elseif until_ms > 0 then
        found = false
        changed = true
      else
        changed = true
      end
    elseif w[2] + 1000 >= now_ms then
      kept[#kept + 1] = w
    else
      changed = true
    end
  end
  if until_ms > 0 and not found then
    kept[#kept + 1] = { tag, until_ms }
    changed = true
  elseif until_ms == -1 and mine >= 0 then
    kept[#kept + 1] = { tag, mine }
  end
  if not changed then return end
  vt_waiters_write(meta, kept)
  if until_ms > 0 then
    -- Its entry is read until a second past its time (vt_waiters_wake).
    vt_mark(mine + 1000)
    -- meta lives until this process's time at least. Every writer of meta gives it a time to live, so
    -- one that held a list has one: GT extends it. A list just started may have created meta (NX).
    local ttl = math.max(1, math.ceil(mine - now_ms + 1))
    if value or vt_expire(meta, ttl, now_ms, 'NX') == 0 then vt_expire(meta, ttl, now_ms, 'GT') end
  end
  if until_ms == 0 and was_head then vt_waiters_wake(kept, channel, key, now_ms) end
end
