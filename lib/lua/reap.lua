--[[
  reap: gives back the slots a dead process booked ahead and never started (docs/design.md §5, "A
  process that dies"). A process's stamp (alive.lua) '<at>:<n>:<hold>:<replid>' is stale once the
  store clock is past AT + STALE_MS; only a stamp this Redis wrote is one (includes/alive.lua). Its owner starts a slot booked ahead only if the slot's start is at
  most its last stamp confirmed by Redis + STALE_MS - a margin, and only while its stamps came less
  than STALE_MS apart (lib/stores/redis-liveness.ts). So a slot of a process with a stale stamp
  whose number is at most N (asked for before that stamp was sent) and whose start (score - HOLD)
  lies after AT + STALE_MS never started, and never will: it leaves the log. Slots with a later
  number (asked for after the last stamp), or a start before AT + STALE_MS (they may have started),
  count to their bound as before.

  KEYS     LOG, META, and on a standalone Redis the namespace's stamps (ALIVE)
  ARGV     CHANNEL (the namespace's wake channel prefix), STALE_MS, then per process: TAG AT N HOLD,
           its stamp as the caller read it stale.
  With ALIVE, each stamp is read again here (same clock, same moment): a process whose stamp
  changed since, or is not stale now, keeps its slots. Without (a Cluster: the stamps live in
  another slot, read by the caller with their own master's clock), only slots still booked ahead
  by this Redis's clock leave: a slot whose start has passed here may have started (the owner's
  check compares the same two numbers, so no clock between masters need agree for slots booked
  ahead).
  The processes found dead leave the key's list of waiting processes (meta `w`); if any slot left
  or any entry went, the first process still waiting is woken.
  Returns the number of slots removed.
]]
--- @include "log"
--- @include "waiters"

local log, meta, alive = KEYS[1], KEYS[2], KEYS[3]
local channel, stale_ms = ARGV[1], tonumber(ARGV[2])
local now = vt_now()
-- A stamp counts only where this Redis wrote it (includes/alive.lua).
local replid = alive and vt_replid()
local removed = 0
-- Processes found dead here: they leave the key's list of waiting processes too (else each
-- completion would go on waking the dead one first until its entry lapses, up to MAX_HOLD later).
local dead = {}

for i = 3, #ARGV, 4 do
  local tag, at, n, hold = ARGV[i], tonumber(ARGV[i + 1]), tonumber(ARGV[i + 2]), tonumber(ARGV[i + 3])
  local current = alive and redis.call('HGET', alive, tag)
  local still = alive == nil or (current == string.format('%d:%d:%d:', at, n, hold) .. replid and now > at + stale_ms)
  if still then
    dead[tag] = true
    local after = at + stale_ms
    if alive == nil then after = math.max(after, math.ceil(now)) end
    local members = redis.call('ZRANGEBYSCORE', log, '(' .. string.format('%d', after + hold), '+inf')
    local gone = {}
    local suffix_at = -#tag
    for _, member in ipairs(members) do
      if string.sub(member, suffix_at) == tag then
        local number = tonumber(string.sub(member, 1, #member - #tag))
        if number ~= nil and number <= n then gone[#gone + 1] = member end
      end
    end
    for from = 1, #gone, 1000 do
      removed = removed + redis.call('ZREM', log, unpack(gone, from, math.min(#gone, from + 999)))
    end
  end
end

local waiting = redis.call('HGET', meta, 'w')
if waiting then
  local list = vt_waiters_parse(waiting)
  local kept = {}
  for _, w in ipairs(list) do
    if not dead[w[1]] then kept[#kept + 1] = w end
  end
  if #kept < #list then vt_waiters_write(meta, kept) end
  if removed > 0 or #kept < #list then vt_waiters_wake(kept, channel, vt_user_key(log), math.ceil(now)) end
end
return removed
