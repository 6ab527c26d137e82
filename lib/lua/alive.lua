--[[
  alive: a namespace's liveness stamps (docs/design.md §5, "A process that dies"). One hash per
  namespace, `<prefix>:<name>:alive`: field = a process's member tag, value =
  '<at>:<n>:<hold>:<replid>' (at: the store clock, ms, when the process last said it was alive; n:
  the highest slot number it had asked for by then; hold: its maxHoldMs there; replid: the Redis
  that wrote it, includes/alive.lua). A process writes it while it holds slots
  booked ahead, and removes it when it holds none (or closes): a missing field means unknown, never
  dead.

  KEYS[1]  the namespace's stamps
  ARGV     MODE, then by mode:
           'stamp' TAG N HOLD KEEP_MS SWEEP READ: writes TAG's stamp (not when a stamp with a higher N
                   is there: a write that arrived late), the hash lives KEEP_MS more; SWEEP 1 also
                   drops stamps older than KEEP_MS. Returns the time written, or -1 when not written;
                   with READ 1, { that, then what 'read' returns }.
           'read'  KEEP_MS: returns { now, TAG, VALUE, TAG, VALUE, ... }, every stamp this Redis
                   wrote (one written before a failover or a restart is no evidence); drops those
                   older than KEEP_MS (processes long dead).
           'drop'  TAG: removes TAG's stamp. Returns 1.
]]
--- @include "log"
--- @include "alive"

local alive = KEYS[1]
local mode = ARGV[1]
local now = vt_now()

if mode == 'stamp' then
  local at = vt_stamp(alive, ARGV[2], tonumber(ARGV[3]), tonumber(ARGV[4]), tonumber(ARGV[5]), ARGV[6] == '1', now)
  if ARGV[7] == '1' then return vt_alive_read(alive, tonumber(ARGV[5]), now, { at }) end
  return at
elseif mode == 'read' then
  return vt_alive_read(alive, tonumber(ARGV[2]), now, {})
end
redis.call('HDEL', alive, ARGV[2])
return 1
