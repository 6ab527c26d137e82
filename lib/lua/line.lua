--[[
  line: a place in the key's line of calls that wait outside the throttle for a later window (a
  BullMQ job delayed until its slot: lib/adapters/bullmq.ts), shared by every process. The line
  takes up to PER_WINDOW places a window of WINDOW ms: its first window starts FROM ms from now
  (when the key's log has room), each next one a window after the last, and a place asked for a
  window or more past the line's last window starts the line again there. A place is an estimate,
  not a booking: its holder asks the log for a slot when the place comes (lib/slot-plan.ts,
  placeInLine, is the same rule for the MemoryStore).

  KEYS[1]  meta      hash of the key (includes/log.lua); field `la` = the start of the line's last
                     window (store clock, ms), `ln` = places taken in it
  KEYS[2]  kept      the namespace's index of kept keys (includes/log.lua); none on a Cluster
  ARGV[1]  FROM        ms from now
  ARGV[2]  PER_WINDOW  places per window
  ARGV[3]  WINDOW      ms

  Returns ms from now until the place.
]]
--- @include "log"

local meta = KEYS[1]
vt_kept(KEYS[2])
local now = math.ceil(vt_now())
local from = now + math.ceil(tonumber(ARGV[1]))
local per_window, window = tonumber(ARGV[2]), tonumber(ARGV[3])
local line = redis.call('HMGET', meta, 'la', 'ln')
local at, taken = tonumber(line[1]), tonumber(line[2])
if at == nil or at + window <= from then
  at, taken = from, 1
elseif taken < per_window then
  taken = taken + 1
else
  at, taken = at + window, 1
end
redis.call('HSET', meta, 'la', at, 'ln', taken)
vt_keep(meta, at + window - now, now)
return math.max(at, from) - now
