--[[
  line: a place in the key's line of calls that wait outside the throttle for a later window (a
  BullMQ job delayed until its slot: lib/adapters/bullmq.ts), shared by every process. Each rule
  (a pace: LIMIT places a WINDOW) keeps the start of its current window and the places taken in it;
  a call of cost COST takes COST places. A place is at the soonest time from FROM that every pace
  allows: its current window if it has room for COST more, else the window after it; each pace
  whose window has ended by then starts a new one there. With BEHIND, a place is given only behind
  places not due yet (a pace's current window starts after now); else nothing is written.
  A place is an estimate, not a booking: its holder asks the log for a slot when the place comes
  (lib/slot-plan.ts, placeInLine, is the same rule for the MemoryStore).

  KEYS[1]  meta      hash of the key (includes/log.lua); fields `la<i>` = the start of pace i's
                     current window (store clock, ms), `ln<i>` = places taken in it, `le` = when
                     the line has no more use (the end of every current window; vt_tidy keeps meta
                     until then)
  KEYS[2]  kept      the namespace's index of kept keys (includes/log.lua); none on a Cluster
  KEYS[3]  mark      the namespace's mark (includes/log.lua); none on a Cluster
  ARGV[1]  FROM      ms from now: the soonest the caller's call could start
  ARGV[2]  COST      places the call takes (at most the smallest LIMIT)
  ARGV[3]  BEHIND    '1': only behind places not due yet
  ARGV[4..] LIMIT, WINDOW (ms) of each pace, in pairs

  Returns ms from now until the place, or -1 (BEHIND, and no place is due after now).
]]
--- @include "log"

local meta = KEYS[1]
vt_namespace(KEYS[2], KEYS[3])
local now = math.ceil(vt_now())
local at = now + math.ceil(tonumber(ARGV[1]))
local cost = tonumber(ARGV[2])
local ahead = false
local paces = {}
for i = 4, #ARGV, 2 do
  local n = #paces + 1
  local line = redis.call('HMGET', meta, 'la' .. n, 'ln' .. n)
  local pace = { limit = tonumber(ARGV[i]), window = tonumber(ARGV[i + 1]), start = tonumber(line[1]), taken = tonumber(line[2]) }
  if pace.start ~= nil then at = math.max(at, pace.taken + cost <= pace.limit and pace.start or pace.start + pace.window) end
  if pace.start ~= nil and pace.start > now then ahead = true end
  paces[n] = pace
end
if ARGV[3] == '1' and not ahead then return -1 end
local lasts = 0
for n, pace in ipairs(paces) do
  if pace.start == nil or at >= pace.start + pace.window then pace.start, pace.taken = at, 0 end
  redis.call('HSET', meta, 'la' .. n, pace.start, 'ln' .. n, pace.taken + cost)
  lasts = math.max(lasts, pace.start + pace.window)
end
redis.call('HSET', meta, 'le', lasts)
vt_keep(meta, lasts - now, now)
return at - now
