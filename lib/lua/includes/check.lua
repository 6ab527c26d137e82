--[[
  check: whether a key still holds what this process knows it wrote there (docs/design.md §9, "One
  key loses its data"). A key can lose its data alone: evicted under maxmemory, wiped with its
  Cluster shard (FLUSHALL, a master restarted empty), or rolled back by a failover to a replica that
  had not received the latest writes. The caller names its newest slot on the key (its witness),
  its score, and until when it counts. A witness missing before its time is a loss: the key is held (no
  decision on it, from any process, until GRACE ms from now) while every process that knows calls
  on it puts them back (restore.lua).

  A[I ..]  NUMBER     the witness (its member is NUMBER followed by TAG)
           SCORE      its score as this process wrote it (rounded up)
           KEY_UNTIL  store-clock ms until which it counts: until then no trim removes it
  A witness missing while it counts is a loss, unless a fold moved it into the buckets: meta `f` is
  the highest score a fold removed from the log (includes/buckets.lua), whatever rules the folding
  process had. A key whose meta went too has no `f`: any missing witness that counts is a loss.
  FULL: also look at meta (the heartbeat's check, with no decision after it). A decision reads meta
  itself: a key held, or taken by another Redis than this one (a failover), answers VT_RULE_RECOVERING
  (decide.lua), and the caller puts back its calls there as for VT_CHECK_HELD.

  Returns VT_CHECK_WHOLE, VT_CHECK_LOST (the caller puts back its calls) or VT_CHECK_HELD (FULL only, held: another
  process found a loss, or the key's last booking was taken by another Redis than this one, meta
  `r`: a failover since; the caller puts back its calls too, harmless if they are there), and the
  index in A after its arguments.
]]
-- Whether a witness found gone, scored SCORE, is a loss: not when a fold moved it into the buckets.
local function vt_witness_lost(meta, score)
  return tonumber(redis.call('HGET', meta, 'f') or 0) < tonumber(score)
end

-- Whether WITNESS { number, score, until_ms } is gone from LOG while it counts: a loss.
local function vt_witness_missing(log, meta, tag, now, witness)
  return now < witness.until_ms and not redis.call('ZSCORE', log, witness.number .. tag) and vt_witness_lost(meta, witness.score)
end

local function vt_check(log, meta, tag, now, grace, replid, a, i, full)
  local status = VT_CHECK_WHOLE
  local score = tonumber(a[i + 1])
  if now < tonumber(a[i + 2]) and not redis.call('ZSCORE', log, a[i] .. tag) and vt_witness_lost(meta, score) then status = VT_CHECK_LOST end
  if status == VT_CHECK_LOST then
    vt_hold(log, meta, now, grace)
  elseif full then
    local hold, taken_by = unpack(redis.call('HMGET', meta, 'h', 'r'))
    if vt_failed_over(log, meta, taken_by, replid, now, grace) or tonumber(hold or 0) > now then status = VT_CHECK_HELD end
  end
  return status, i + 3
end
