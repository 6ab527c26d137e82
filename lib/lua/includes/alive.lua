-- Liveness stamps (alive.lua; docs/design.md §5, "A process that dies"): one hash per namespace,
-- field = a process's member tag, value = '<at>:<n>:<hold>:<replid>'. Written by alive.lua 'stamp',
-- and by batch.lua when a stamp rides a batch. Included after "log".
--
-- A stamp names the Redis that wrote it (vt_replid: a restart or a failover changes it). A Redis
-- that rolled back (a replica that missed writes promoted, a restart from an older snapshot) may
-- hold an older stamp of a live process, stale by its time though its owner went on stamping and
-- starting slots up to its newer stamps: only a stamp written by this Redis is read as one, so no
-- slot is given back on an older one. Its owner's next stamp, written here, counts again.

-- The time (ms) of a stamp's value.
local function vt_stamp_at(value)
  return tonumber(string.match(value, '^(%d+):')) or 0
end

-- Drops the stamps of ALIVE older than KEEP_MS at NOW (VALUES: its HGETALL).
local function vt_alive_sweep(alive, keep_ms, values, now)
  local old = {}
  for i = 1, #values, 2 do
    if vt_stamp_at(values[i + 1]) + keep_ms < now then old[#old + 1] = values[i] end
  end
  if #old > 0 then redis.call('HDEL', alive, unpack(old)) end
end

-- Writes TAG's stamp at NOW: N, the highest slot number it had asked for, HOLD its maxHoldMs (not
-- when a stamp with a higher N is there: a write that arrived late); the hash lives KEEP_MS more;
-- SWEEP also drops stamps older than KEEP_MS. Returns the time written, or -1 when not written.
local function vt_stamp(alive, tag, n, hold, keep_ms, sweep, now)
  local old = redis.call('HGET', alive, tag)
  if old and tonumber(string.match(old, '^%d+:(%d+):')) > n then return -1 end
  local at = math.floor(now)
  redis.call('HSET', alive, tag, string.format('%d:%d:%d:', at, n, hold) .. vt_replid())
  redis.call('PEXPIRE', alive, keep_ms)
  if sweep then vt_alive_sweep(alive, keep_ms, redis.call('HGETALL', alive), now) end
  return at
end

-- Appends to OUT the store time NOW (whole ms) and the stamps of ALIVE written by this Redis, as
-- TAG, VALUE pairs; drops those older than KEEP_MS. Returns OUT.
local function vt_alive_read(alive, keep_ms, now, out)
  local values = redis.call('HGETALL', alive)
  vt_alive_sweep(alive, keep_ms, values, now)
  out[#out + 1] = math.floor(now)
  local here = ':' .. vt_replid()
  for i = 1, #values, 2 do
    local value = values[i + 1]
    if string.sub(value, -#here) == here and string.find(value, '^%d+:%d+:%d+:%x*$') then
      out[#out + 1] = values[i]
      out[#out + 1] = value
    end
  end
  return out
end
