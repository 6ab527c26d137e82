-- Bucketed rules: long windows with large limits in bounded memory. Included where a script says
-- `--- @include "buckets"`, after "log".

-- Rules come as R, then R triples: LIMIT, WINDOW (ms), BUCKET (ms; 0 = exact). A bucketed rule
-- (BUCKET > 0) counts completed calls older than the exact rules' longest window, once a decision
-- folds them (vt_fold_due in includes/decide.lua), in buckets, fields
-- 'b:<WINDOW>:<BUCKET>:<index>' of meta: a call that ended at s counts as if it ended at
-- ceil(s / BUCKET) × BUCKET, the end of its bucket (never earlier: a call is held back by less than
-- one bucket width, never let through early). See lib/slot-plan.ts (bucketIndex, bucketedFreeAt).

-- The buckets of a bucketed rule that still count at AT (whole ms, the clock rounded down: a bucket
-- gone at AT is gone at the reading), ascending: { {end, count}, ... }. A fold at AT writes no index
-- above ceil(AT / BUCKET); one more is read for a fold whose AT was the clock rounded up.
local function vt_buckets(meta, window, bucket, at)
  local fields = {}
  local first = math.floor((at - window) / bucket) + 1
  for index = first, math.ceil((at + 1) / bucket) do fields[#fields + 1] = 'b:' .. window .. ':' .. bucket .. ':' .. index end
  local counts = redis.call('HMGET', meta, unpack(fields))
  local out = {}
  for k = 1, #fields do
    local count = tonumber(counts[k] or 0)
    if count > 0 then out[#out + 1] = { (first + k - 1) * bucket, count } end
  end
  return out
end

-- Moves calls whose release is known and older than the fold horizon at AT (whole ms, the clock
-- rounded down) out of the log, into their buckets, and deletes the buckets that no longer count.
-- Buckets belong to a distinct (WINDOW, BUCKET): rules sharing both (duplicates, or one window with
-- several limits) read the same buckets, and each call is folded into them once. Per (WINDOW,
-- BUCKET) meta keeps 'b:<WINDOW>:<BUCKET>:low' (no bucket field of it lies below: those were
-- deleted) and ':n' (the calls in its buckets, all of which still count). Returns the latest time a
-- bucket folded into still counts until (0 when none), for the keys' lifetime, the calls in the
-- buckets per rule index, and the calls that left the log. F: meta `f` as read with the key's state.
-- HORIZON: at least this much history stays in the log (a learned rule of another window, exact).
local function vt_fold(log, meta, a, rules_at, rule_count, at, f, horizon)
  horizon = horizon or 0
  local groups = {}
  local by_prefix = {}
  for r = 0, rule_count - 1 do
    local window = tonumber(a[rules_at + 3 * r + 1])
    local bucket = tonumber(a[rules_at + 3 * r + 2])
    if bucket > 0 then
      local prefix = 'b:' .. window .. ':' .. bucket .. ':'
      local group = by_prefix[prefix]
      if group == nil then
        group = { window = window, bucket = bucket, prefix = prefix, rules = {} }
        by_prefix[prefix] = group
        groups[#groups + 1] = group
      end
      group.rules[#group.rules + 1] = r
    else
      horizon = math.max(horizon, window)
    end
  end
  local totals = {}
  if #groups == 0 then return 0, totals, 0 end
  local fields = {}
  for k, group in ipairs(groups) do
    fields[2 * k - 1] = group.prefix .. 'low'
    fields[2 * k] = group.prefix .. 'n'
  end
  local known = redis.call('HMGET', meta, unpack(fields))
  local changes = {}
  for k, group in ipairs(groups) do
    local prefix = group.prefix
    local first_live = math.floor((at - group.window) / group.bucket) + 1
    local low = tonumber(known[2 * k - 1])
    local stored = tonumber(known[2 * k])
    local n = stored or 0
    local dead = {}
    if low == nil then
      -- Nothing folded yet (no bucket field), or a key written before `low` was kept: n is counted
      -- again from the live buckets. (Dead buckets of such a key go with meta.)
      if stored ~= nil then
        n = 0
        for _, b in ipairs(vt_buckets(meta, group.window, group.bucket, at)) do n = n + b[2] end
      end
    else
      -- Every field of this (WINDOW, BUCKET) was written by a decision at some time t, at an index
      -- from first_live(t) to ceil(t / BUCKET): no field lies above low + ceil(WINDOW / BUCKET) + 1,
      -- so however long the key was idle, at most that many indices are visited.
      local top = math.min(first_live - 1, low + math.ceil(group.window / group.bucket) + 1)
      for index = low, top do dead[#dead + 1] = prefix .. index end
    end
    -- In chunks: unpack() takes a few thousand values at most.
    for from = 1, #dead, 1000 do
      local chunk = { unpack(dead, from, math.min(#dead, from + 999)) }
      for _, count in ipairs(redis.call('HMGET', meta, unpack(chunk))) do n = n - tonumber(count or 0) end
      redis.call('HDEL', meta, unpack(chunk))
    end
    group.n = n
    group.stored = stored
    if tonumber(known[2 * k - 1]) ~= first_live then
      changes[#changes + 1] = prefix .. 'low'
      changes[#changes + 1] = first_live
    end
  end
  local until_ms = 0
  local old = redis.call('ZRANGEBYSCORE', log, '-inf', at - horizon, 'WITHSCORES')
  -- Calls per bucket first, then one HINCRBY per bucket: the calls of a fold mostly share a few.
  local adds = {}
  for e = 2, #old, 2 do
    local score = tonumber(old[e])
    for _, group in ipairs(groups) do
      local index = math.ceil(score / group.bucket)
      -- A call whose bucket no longer counts (not trimmed yet) just leaves.
      if index * group.bucket + group.window > at then
        local field = group.prefix .. index
        if adds[field] == nil then
          adds[field] = 0
          adds[#adds + 1] = field
        end
        adds[field] = adds[field] + 1
        group.n = group.n + 1
        until_ms = math.max(until_ms, index * group.bucket + group.window)
      end
    end
  end
  for _, field in ipairs(adds) do redis.call('HINCRBY', meta, field, adds[field]) end
  local removed = 0
  if #old > 0 then
    removed = redis.call('ZREMRANGEBYSCORE', log, '-inf', at - horizon)
    -- Nothing scored at or below this is in the log any more (includes/check.lua reads it). Never
    -- lowered: a reset (reset.lua) may have removed slots scored above the fold's horizon.
    changes[#changes + 1] = 'f'
    changes[#changes + 1] = math.max(at - horizon, f)
  end
  for _, group in ipairs(groups) do
    for _, r in ipairs(group.rules) do totals[r] = group.n end
    if group.n ~= group.stored then
      changes[#changes + 1] = group.prefix .. 'n'
      changes[#changes + 1] = group.n
    end
  end
  if #changes > 0 then
    redis.call('HSET', meta, unpack(changes))
    -- Nothing folded to count on: meta may have just been created by these fields, without a time
    -- to live. They matter for a window at most.
    if until_ms == 0 then
      local longest = 0
      for _, group in ipairs(groups) do longest = math.max(longest, group.window) end
      -- AT is the clock rounded down: one ms more never shortens the life asked for.
      vt_keep(meta, longest, at + 1)
    end
  end
  -- Decisions of bucketed rule sets read meta while some bucket counts (VT_MARK, includes/log.lua).
  if until_ms > 0 then vt_mark(until_ms, 'b') end
  return until_ms, totals, removed
end

-- Earliest time from FROM at which COST more calls keep a bucketed rule (bucketedFreeAt in
-- lib/slot-plan.ts): with the j oldest buckets gone, at most LIMIT - COST - (calls in the others)
-- calls of the log may still count. Returns the time and the log entry that set it (nil when a
-- bucket or FROM did).
local function vt_bucketed_free_at(log, size, buckets, limit, window, cost, from)
  local remaining = 0
  for _, b in ipairs(buckets) do remaining = remaining + b[2] end
  local best = math.huge
  local best_entry = nil
  local gone_until = -math.huge
  for j = 0, #buckets do
    if gone_until >= best then break end
    local allowed = limit - cost - remaining
    if allowed >= 0 then
      local t = math.max(from, gone_until)
      local entry = nil
      local at = size - allowed - 1
      if at >= 0 then
        local candidate = redis.call('ZRANGE', log, at, at, 'WITHSCORES')
        if tonumber(candidate[2]) + window > t then
          t = tonumber(candidate[2]) + window
          entry = candidate
        end
      end
      if t < best then
        best = t
        best_entry = entry
      end
    end
    if j < #buckets then
      gone_until = buckets[j + 1][1] + window
      remaining = remaining - buckets[j + 1][2]
    end
  end
  return best, best_entry
end

