--[[
  alive: a namespace's liveness stamps (docs/design.md §5, "A process that dies"). One hash per
  namespace, `<prefix>:<name>:alive`: field = a process's member tag, value = '<at>:<n>:<hold>'
  (at: the store clock, ms, when the process last said it was alive; n: the highest slot number
  it had asked for by then; hold: its maxHoldMs there). A process writes it while it holds slots
  booked ahead, and removes it when it holds none (or closes): a missing field means unknown, never
  dead.

  KEYS[1]  the namespace's stamps
  ARGV     MODE, then by mode:
           'stamp' TAG N HOLD KEEP_MS SWEEP: writes TAG's stamp (not when a stamp with a higher N
                   is there: a write that arrived late), the hash lives KEEP_MS more; SWEEP 1 also
                   drops stamps older than KEEP_MS. Returns the time written, or -1 when not written.
           'read'  KEEP_MS: returns { now, TAG, VALUE, TAG, VALUE, ... }, every stamp; drops those
                   older than KEEP_MS (processes long dead).
           'drop'  TAG: removes TAG's stamp. Returns 1.
]]
--- @include "log"

local alive = KEYS[1]
local mode = ARGV[1]
local now = vt_now()

local function stamp_at(value)
  return tonumber(string.match(value, '^(%d+):')) or 0
end

local function sweep(keep_ms, values)
  local old = {}
  for i = 1, #values, 2 do
    if stamp_at(values[i + 1]) + keep_ms < now then old[#old + 1] = values[i] end
  end
  if #old > 0 then redis.call('HDEL', alive, unpack(old)) end
end

if mode == 'stamp' then
  local tag, n, hold, keep_ms = ARGV[2], tonumber(ARGV[3]), tonumber(ARGV[4]), tonumber(ARGV[5])
  local old = redis.call('HGET', alive, tag)
  if old and tonumber(string.match(old, '^%d+:(%d+):')) > n then return -1 end
  local at = math.floor(now)
  redis.call('HSET', alive, tag, string.format('%d:%d:%d', at, n, hold))
  redis.call('PEXPIRE', alive, keep_ms)
  if ARGV[6] == '1' then sweep(keep_ms, redis.call('HGETALL', alive)) end
  return at
elseif mode == 'read' then
  local values = redis.call('HGETALL', alive)
  sweep(tonumber(ARGV[2]), values)
  local out = { math.floor(now) }
  for i = 1, #values do out[#out + 1] = values[i] end
  return out
end
redis.call('HDEL', alive, ARGV[2])
return 1
