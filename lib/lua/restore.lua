--[[
  restore: puts calls into a key's log that its current contents do not hold: calls a process
  decided locally while the store was down, or, after the store lost its data, the calls each
  process still knows it made (its journal). Never removes anything, never changes an entry
  already present (ZADD NX), so putting the same calls back twice is harmless.

  KEYS[1]  log       sorted set of slots (see includes/log.lua)
  KEYS[2]  meta      hash of the key
  KEYS[3]  kept      the namespace's index of kept keys (includes/log.lua); none on a Cluster
  KEYS[4]  mark      the namespace's mark (includes/log.lua); none on a Cluster
  ARGV[1]  RETAIN    ms of history to keep
  ARGV[2]  RELATIVE  1: scores are ms from the store's now; 0: absolute store-clock times (ms)
  ARGV[3]  HOLD      ms to hold the key from now (0: none), when this put back anything: a key found
                     lost is put back under a hold (includes/check.lua), set again here in case it
                     went with the key again
  ARGV[4]  N, followed by N pairs: MEMBER, SCORE (the slot's release: its completion, or the
           bound START + MAX_HOLD of a call whose completion is not known)
  then     P (none: 0), followed by P pairs MEMBER, LIFE: the pointer keys of this process's claims
           on the key (lua/claim.lua), the last P of KEYS, set to MEMBER for LIFE ms unless present:
           a reservation claimed before the loss stays claimed

  Returns the number of entries added.
]]
--- @include "log"

local log, meta = KEYS[1], KEYS[2]
local retain = tonumber(ARGV[1])
local relative = ARGV[2] == '1'
local hold = tonumber(ARGV[3])
local count = tonumber(ARGV[4])
local pointers = tonumber(ARGV[5 + 2 * count] or 0)
local kept = #KEYS - 2 - pointers > 0
vt_namespace(kept and KEYS[3] or nil, kept and KEYS[4] or nil)
local now = vt_now()
local now_ms = math.ceil(now)
local added = 0
local latest = 0
for i = 0, count - 1 do
  local member = ARGV[5 + 2 * i]
  local score = tonumber(ARGV[6 + 2 * i])
  if relative then score = now_ms + math.ceil(score) end
  -- A call that no longer counts anywhere is not put back.
  if score + retain > math.floor(now) then
    added = added + redis.call('ZADD', log, 'NX', score, member)
    latest = math.max(latest, score)
  end
end
for j = 1, pointers do
  local life = tonumber(ARGV[5 + 2 * count + 2 * j])
  if life > 0 then redis.call('SET', KEYS[#KEYS - pointers + j], ARGV[4 + 2 * count + 2 * j], 'PX', life, 'NX') end
end
if latest > 0 then vt_keep(log, latest + retain - now, now) end
if hold > 0 and added > 0 then vt_hold(log, meta, now, hold) end
if VT_KEPT ~= nil then
  vt_take_in(log, now)
  vt_take_in(meta, now)
end
return added
