--[[
  check: whether a key's log still holds what this process knows it wrote there (docs/design.md §9,
  "A key that lost its data"). A log can lose its data alone: evicted under maxmemory, wiped with its
  Cluster shard (FLUSHALL, a master restarted empty), or rolled back by a failover to a replica that
  had not received the latest writes. The caller names its newest slot on the key that must still be
  there (its witness) and the replication id of the Redis that last showed it. When the slot is
  missing, or the Redis is another one now (a failover since), the key is held: no decision on it,
  from any process, until GRACE ms from now, while every process that knows calls on it puts them
  back (restore.lua). Replication is ordered, so a witness still present means every earlier write
  of the same process to the key is present too.

  A[I ..]  NUMBER  the witness (its member is NUMBER followed by TAG)
           REPLID  the replication id the caller last saw for the key ('' = none yet)
           GRACE   ms the key is held when the check fails

  Returns 0 (whole), 1 (the witness is missing: the caller puts back its calls) or 2 (the witness
  is there, on another Redis: others may have lost calls), and the index in A after its arguments.
]]
local function vt_check(log, meta, tag, now, replid, a, i)
  local status = 0
  if not redis.call('ZSCORE', log, a[i] .. tag) then
    status = 1
  elseif a[i + 1] ~= '' and a[i + 1] ~= replid then
    status = 2
  end
  if status > 0 then
    local hold = math.ceil(now + tonumber(a[i + 2]))
    if hold > tonumber(redis.call('HGET', meta, 'h') or 0) then
      redis.call('HSET', meta, 'h', hold)
      vt_keep(meta, hold - now)
    end
  end
  return status, i + 3
end

-- The replication id of this Redis (INFO replication): it changes when a replica is promoted, or
-- when Redis restarts without its data.
local function vt_replid()
  return string.match(redis.call('INFO', 'replication'), 'master_replid:(%x+)') or ''
end
