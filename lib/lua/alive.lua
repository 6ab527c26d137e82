--[[
  alive: a namespace's liveness stamps (docs/design.md §5, "A process that dies"). One hash per
  namespace, `<prefix>:<name>:alive`: field = a process's member tag, value = '<at>:<n>:<hold>'
  (at: the store clock, ms, when the process last said it was alive; n: the highest slot number
  it had asked for by then; hold: its maxHoldMs there). A process writes it while it holds slots
  booked ahead, and removes it when it holds none (or closes): a missing field means unknown, never
  dead.

  KEYS[1]  the namespace's stamps
  ARGV     MODE, then by mode:
           'stamp' TAG N HOLD KEEP_MS SWEEP READ: writes TAG's stamp (not when a stamp with a higher N
                   is there: a write that arrived late), the hash lives KEEP_MS more; SWEEP 1 also
                   drops stamps older than KEEP_MS. Returns the time written, or -1 when not written;
                   with READ 1, { that, then what 'read' returns }.
           'read'  KEEP_MS: returns { now, TAG, VALUE, TAG, VALUE, ... }, every stamp; drops those
                   older than KEEP_MS (processes long dead).
           'drop'  TAG: removes TAG's stamp. Returns 1.
]]
--- @include "log"
--- @include "alive"

local alive = KEYS[1]
local mode = ARGV[1]
local now = vt_now()

local function read(keep_ms, out)
  local values = redis.call('HGETALL', alive)
  vt_alive_sweep(alive, keep_ms, values, now)
  out[#out + 1] = math.floor(now)
  for i = 1, #values do out[#out + 1] = values[i] end
  return out
end

if mode == 'stamp' then
  local at = vt_stamp(alive, ARGV[2], tonumber(ARGV[3]), tonumber(ARGV[4]), tonumber(ARGV[5]), ARGV[6] == '1', now)
  if ARGV[7] == '1' then return read(tonumber(ARGV[5]), { at }) end
  return at
elseif mode == 'read' then
  return read(tonumber(ARGV[2]), {})
end
redis.call('HDEL', alive, ARGV[2])
return 1
