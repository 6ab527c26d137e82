-- The operations a batch (batch.lua) runs on one key: decide (reserve), settle, confirm. Each reads
-- its arguments from the array A starting at index I, and returns its reply and the index of the
-- next operation's first argument. Needs the "log" include. See docs/design.md.
--
-- A key is three Redis keys sharing one hash tag:
--   log     sorted set, one member per slot: while the call's completion is unknown the member is
--           the slot number and the score start + HOLD (an estimate); once settled the member is
--           the number followed by '!' and the score the completion time (ms)
--   meta    hash: seq = last slot number, last = latest booked start (ms),
--           pause = no start before this (ms), set by pause.lua when the vendor says so
--   flight  sorted set: the slots not settled yet, scored by their estimate (start + HOLD)

-- Rules come as R, then R triples: LIMIT, WINDOW (ms), BUCKET (ms; 0 = exact). A bucketed rule
-- (BUCKET > 0) counts completed calls older than the exact rules' longest window in buckets, fields
-- 'b:<WINDOW>:<BUCKET>:<index>' of meta: a call that ended at s counts as if it ended at
-- ceil(s / BUCKET) × BUCKET, the end of its bucket (never earlier: a call is held back by less than
-- one bucket width, never let through early). See lib/decision.ts (bucketIndex, bucketedFreeAt).

-- The buckets of a bucketed rule that still count at NOW_MS, ascending: { {end, count}, ... }.
local function vt_buckets(meta, window, bucket, now_ms)
  local fields = {}
  local first = math.floor((now_ms - window) / bucket) + 1
  for index = first, math.ceil(now_ms / bucket) do fields[#fields + 1] = 'b:' .. window .. ':' .. bucket .. ':' .. index end
  local counts = redis.call('HMGET', meta, unpack(fields))
  local out = {}
  for k = 1, #fields do
    local count = tonumber(counts[k] or 0)
    if count > 0 then out[#out + 1] = { (first + k - 1) * bucket, count } end
  end
  return out
end

-- Moves completed calls (and calls no longer in flight) older than the fold horizon out of the log,
-- into their buckets, and deletes the buckets that no longer count. Buckets belong to a distinct
-- (WINDOW, BUCKET): rules sharing both (duplicates, or one window with several limits) read the same
-- buckets, and each call is folded into them once. Per (WINDOW, BUCKET) meta keeps
-- 'b:<WINDOW>:<BUCKET>:low' (no bucket field of it lies below: those were deleted) and ':n' (the
-- calls in its buckets, all of which still count). Returns the latest time a bucket folded into
-- still counts until (0 when none), for the keys' lifetime, and the calls in the buckets per rule
-- index.
local function vt_fold(log, meta, flight, a, rules_at, rule_count, now_ms)
  local horizon = 0
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
  if #groups == 0 then return 0, totals end
  local fields = {}
  for k, group in ipairs(groups) do
    fields[2 * k - 1] = group.prefix .. 'low'
    fields[2 * k] = group.prefix .. 'n'
  end
  fields[#fields + 1] = 'b:until'
  local known = redis.call('HMGET', meta, unpack(fields))
  local changes = {}
  for k, group in ipairs(groups) do
    local prefix = group.prefix
    local first_live = math.floor((now_ms - group.window) / group.bucket) + 1
    local low = tonumber(known[2 * k - 1])
    local stored = tonumber(known[2 * k])
    local n = stored or 0
    local dead = {}
    if low == nil then
      -- Nothing folded yet (no bucket field), or a key written before `low` was kept: n is counted
      -- again from the live buckets. (Dead buckets of such a key go with meta.)
      if stored ~= nil then
        n = 0
        for _, b in ipairs(vt_buckets(meta, group.window, group.bucket, now_ms)) do n = n + b[2] end
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
  local old = redis.call('ZRANGEBYSCORE', log, '-inf', now_ms - horizon, 'WITHSCORES')
  for e = 1, #old, 2 do
    local member = old[e]
    if string.sub(member, -1) == '!' or redis.call('ZSCORE', flight, member) == false then
      local score = tonumber(old[e + 1])
      redis.call('ZREM', log, member)
      for _, group in ipairs(groups) do
        local index = math.ceil(score / group.bucket)
        -- A call whose bucket no longer counts (not trimmed yet) just leaves.
        if index * group.bucket + group.window > now_ms then
          redis.call('HINCRBY', meta, group.prefix .. index, 1)
          group.n = group.n + 1
          until_ms = math.max(until_ms, index * group.bucket + group.window)
        end
      end
    end
  end
  for _, group in ipairs(groups) do
    for _, r in ipairs(group.rules) do totals[r] = group.n end
    if group.n ~= group.stored then
      changes[#changes + 1] = group.prefix .. 'n'
      changes[#changes + 1] = group.n
    end
  end
  -- The latest time a bucket counts until, for pause.lua and restore.lua (vt_expire), which know no rules.
  if until_ms > (tonumber(known[#fields]) or 0) then
    changes[#changes + 1] = 'b:until'
    changes[#changes + 1] = until_ms
  end
  if #changes > 0 then redis.call('HSET', meta, unpack(changes)) end
  return until_ms, totals
end

-- Earliest time from FROM at which COST more calls keep a bucketed rule (bucketedFreeAt in
-- lib/decision.ts): with the j oldest buckets gone, at most LIMIT - COST - (calls in the others)
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

--[[
  reserve: COUNT decisions in a row for one key, each finding the earliest start at which COST
  more calls keep every rule, and booking it unless it is further away than MAX_DELAY.

  A[I ..]  COST       slots per call (1 .. smallest limit)
           MAX_DELAY  ms; book only if the slot starts within it; 'inf' books any slot
           HOLD       ms a booked slot counts as in flight after its start, until settled
           RETAIN     ms of history to keep (at least the longest window)
           DEFER      1: do not book a slot that waits for a call still in flight (in the flight
                      set: no completion yet, not MAX_HOLD past its estimate); answer 'deferred'
                      with a time to ask again
           MAX_HOLD   ms after its estimate an unsettled call may still be in flight
           COUNT      calls to decide, in order (the same request from several waiting callers)
           R          number of rules, followed by R triples: LIMIT, WINDOW (ms), BUCKET (ms, 0 = exact)
           S          number of settlements, followed by S pairs: MEMBER, RELEASE_AT ('' = remove)

  Replies, per call, { status, wait_ms, start_at, rule_index, first_member, now_ms, tentative, retry_ms }
  status: 1 booked, 0 refused (wait_ms > MAX_DELAY), 2 deferred (ask again in retry_ms).
  rule_index: 0-based index of the rule that pushed the slot later, -2 = vendor pause, -1 = neither,
  -3 (deferred) = a new epoch is not ready yet (READY, see vt_epoch).
  tentative: the slot rests on an estimate (a call still in flight set its start, or was taken to
  have left a window by then): confirm checks it again when it is due. first_member is the first of COST consecutive slot numbers (0 unless booked).
  Once a call is refused or deferred, so are the calls after it (their slots could only start later).
]]
local function vt_reserve(log, meta, flight, now, ready, a, i)
  local now_ms = math.ceil(now)
  local cost = tonumber(a[i])
  local max_delay = a[i + 1]
  local hold = tonumber(a[i + 2])
  local retain = tonumber(a[i + 3])
  local defer = a[i + 4] == '1'
  local max_hold = tonumber(a[i + 5])
  local count = tonumber(a[i + 6])
  local rule_count = tonumber(a[i + 7])
  local rules_at = i + 8
  local settle_at = rules_at + 3 * rule_count
  local settle_count = tonumber(a[settle_at])
  local next_op = settle_at + 1 + 2 * settle_count

  local state = redis.call('HMGET', meta, 'seq', 'last', 'pause')
  local seq = tonumber(state[1] or 0)
  local last = tonumber(state[2] or 0)
  local pause = tonumber(state[3] or 0)
  -- The first write of the decision adds memory (HSET is refused with OOM past maxmemory): a Redis
  -- out of memory refuses the decision instead of letting the removals below open the way to writes.
  redis.call('HSET', meta, 'seq', seq)
  local latest = vt_settle(log, flight, a, settle_at + 1, settle_count)
  vt_overdue(log, flight, now, max_hold)
  local folded_until, folded = vt_fold(log, meta, flight, a, rules_at, rule_count, now_ms)
  latest = math.max(latest, folded_until - retain)
  -- Slots older than the history kept no longer count; they sit below every index a rule looks
  -- at, so trimming them once every 16 bookings is enough.
  if seq % 16 + count * cost >= 16 then redis.call('ZREMRANGEBYSCORE', log, '-inf', now_ms - retain) end

  local shortest = math.huge
  for r = 0, rule_count - 1 do shortest = math.min(shortest, tonumber(a[rules_at + 3 * r + 1])) end
  -- A bucketed rule's buckets, read only once the log and the buckets together could fill it.
  local buckets = {}
  local replies = {}
  local size = redis.call('ZCARD', log)
  -- No log, no slot number, no pause: this decision creates the key (its lifetime is set at once).
  local fresh = size == 0 and state[1] == false and state[3] == false
  local booked = false
  for c = 1, count do
    local start_at = math.max(now_ms, last)
    local rule_index = -1
    if pause > now_ms and pause >= start_at then
      start_at = pause
      rule_index = -2
    end
    local binding = nil
    for r = 0, rule_count - 1 do
      local limit = tonumber(a[rules_at + 3 * r])
      local window = tonumber(a[rules_at + 3 * r + 1])
      if folded[r] ~= nil then
        if buckets[r] == nil and size + folded[r] > limit - cost then
          buckets[r] = vt_buckets(meta, window, tonumber(a[rules_at + 3 * r + 2]), now_ms)
        end
        -- Otherwise the log and the buckets together hold too few calls to bind: no constraint.
        local free_at, entry = start_at, nil
        if buckets[r] ~= nil then
          free_at, entry = vt_bucketed_free_at(log, size, buckets[r], limit, window, cost, start_at)
        end
        if free_at > start_at then
          start_at = free_at
          rule_index = r
          binding = entry
        end
      else
        local index = size - limit + cost - 1
        if index >= 0 then
          local entry = redis.call('ZRANGE', log, index, index, 'WITHSCORES')
          local score = tonumber(entry[2])
          if score + window > start_at then
            start_at = score + window
            rule_index = r
            binding = entry
          end
        end
      end
    end

    -- A slot at now_ms starts now (the clock read is rounded up); a later one is waited for in full.
    local wait = 0
    if start_at > now_ms then wait = math.ceil(start_at - now) end
    local reply
    if ready > now_ms then
      -- A new epoch: live processes are putting back their calls; nothing is decided until it is ready.
      local until_ready = math.ceil(ready - now)
      if max_delay ~= 'inf' and until_ready > tonumber(max_delay) then
        reply = { 0, math.max(until_ready, wait), start_at, -2, 0, now_ms, 0, 0 }
      else
        reply = { 2, until_ready, start_at, -3, 0, now_ms, 0, until_ready }
      end
    elseif max_delay ~= 'inf' and wait > tonumber(max_delay) then
      reply = { 0, wait, start_at, rule_index, 0, now_ms, 0, 0 }
    elseif defer and binding ~= nil and redis.call('ZSCORE', flight, binding[1]) then
      -- The slot waits for a call still in flight (its completion not known yet, and not past
      -- MAX_HOLD after its estimate): ask again once its completion likely is. A slot that left the
      -- flight set unsettled (its worker died, its settle was lost) will never be settled: waiting
      -- for it would only repeat this answer until it leaves the window.
      reply = { 2, wait, start_at, rule_index, 0, now_ms, 1, vt_retry_ms(tonumber(binding[2]) - now, wait) }
    end
    if reply ~= nil then
      -- The calls after this one could only start later: the same answer.
      for rest = c, count do replies[rest] = reply end
      break
    end

    seq = seq + cost
    local score = start_at + hold
    -- In chunks: unpack() takes a few thousand values at most, and cost may be as large as a limit.
    for from = 1, cost, 1000 do
      local args = {}
      for k = from, math.min(cost, from + 999) do
        args[#args + 1] = score
        args[#args + 1] = seq - cost + k
      end
      redis.call('ZADD', log, unpack(args))
      redis.call('ZADD', flight, unpack(args))
    end
    size = size + cost
    last = start_at
    booked = true
    -- Tentative: the start rests on an estimate, either the binding slot's (its call is still in
    -- flight) or that of a call in flight taken to have left a window by the start (it might
    -- complete later than its estimate). confirm checks the slot again when it is due. A slot that
    -- starts now rests on no such estimate: a call in flight past its estimate was moved to count
    -- from now (vt_overdue) before this decision. Nor does a binding slot that left the flight set
    -- unsettled: its call is taken to have reached the vendor long ago, and its score no longer
    -- moves, so a confirmation could only find the same.
    local tentative = 0
    if binding ~= nil and redis.call('ZSCORE', flight, binding[1]) then
      tentative = 1
    elseif wait > 0 and #redis.call('ZRANGEBYSCORE', flight, '-inf', start_at - shortest, 'LIMIT', 0, 1) > 0 then
      tentative = 1
    end
    replies[c] = { 1, wait, start_at, rule_index, seq - cost + 1, now_ms, tentative, 0 }
  end

  if booked then
    redis.call('HSET', meta, 'seq', seq, 'last', last)
    vt_extend(log, meta, flight, now_ms, math.max(last + hold + max_hold, latest) + retain, max_hold, fresh)
  elseif latest > 0 then
    vt_extend(log, meta, flight, now_ms, latest + retain, 0)
  elseif redis.call('PTTL', meta) == -1 then
    -- Nothing booked on a key seen for the first time: the probe above must not leave a key behind.
    redis.call('PEXPIRE', meta, math.max(1, retain))
  end
  return replies, next_op
end

--[[
  settle: updates booked slots without deciding anything: a call's completion, or a release (the
  call never started). Trims nothing: a call still in flight may have an old score that only the
  next decision moves up (vt_overdue).

  A[I ..]  RETAIN  ms of history to keep
           S, followed by S pairs: MEMBER, RELEASE_AT ('' = remove)

  Replies 0.
]]
local function vt_settle_op(log, meta, flight, now, a, i)
  local retain = tonumber(a[i])
  local count = tonumber(a[i + 1])
  local latest = vt_settle(log, flight, a, i + 2, count)
  -- A completion only ever needs the keys to live longer (a late one): extend, never shorten.
  if latest > 0 then vt_extend(log, meta, flight, math.ceil(now), latest + retain, 0) end
  return 0, i + 2 + 2 * count
end

--[[
  confirm: checks, when slots booked on an estimate are due, that each still keeps every rule with
  what is known now. Books nothing. See docs/design.md §4.

  First moves every slot past its estimate and not settled to count from now (vt_overdue: such a
  call is still on its way); then, for each slot and rule, counts the slots booked before it (lower
  slot numbers) whose score + WINDOW > START.

  A[I ..]  MAX_HOLD  ms a call may stay in flight at most
           R, number of rules, followed by R triples: LIMIT, WINDOW (ms), BUCKET (ms, 0 = exact)
           G, number of slots to check, followed by G triples: START, FIRST, COST

  Replies, per slot, 1 when it keeps every rule, 0 when it must be booked again (always 0 while a
  new epoch is not ready: some process may not have put back its calls).
]]
local function vt_confirm(log, meta, flight, now, ready, a, i)
  local max_hold = tonumber(a[i])
  local rule_count = tonumber(a[i + 1])
  local rules_at = i + 2
  local groups_at = rules_at + 3 * rule_count
  local group_count = tonumber(a[groups_at])
  local next_op = groups_at + 1 + 3 * group_count
  local replies = {}
  if ready > now then
    for g = 1, group_count do replies[g] = 0 end
    return replies, next_op
  end
  vt_overdue(log, flight, now, max_hold)
  local now_ms = math.ceil(now)
  -- Slots due together (a burst booked ahead) share their start: per start and rule, the numbers
  -- of the slots that count at it, sorted, so that each slot's count is one binary search.
  local counting = {}
  local function numbers_counting(start, r)
    local id = start .. ':' .. r
    if counting[id] == nil then
      local window = tonumber(a[rules_at + 3 * r + 1])
      local entries = redis.call('ZRANGEBYSCORE', log, '(' .. (start - window), '+inf')
      local numbers = {}
      for e = 1, #entries do numbers[e] = tonumber((string.gsub(entries[e], '!$', ''))) end
      table.sort(numbers)
      counting[id] = numbers
    end
    return counting[id]
  end
  local function below(numbers, first)
    local lo, hi = 1, #numbers + 1
    while lo < hi do
      local mid = math.floor((lo + hi) / 2)
      if numbers[mid] < first then lo = mid + 1 else hi = mid end
    end
    return lo - 1
  end
  for g = 0, group_count - 1 do
    local start = tonumber(a[groups_at + 1 + 3 * g])
    local first = tonumber(a[groups_at + 2 + 3 * g])
    local cost = tonumber(a[groups_at + 3 + 3 * g])
    local fits = 1
    for r = 0, rule_count - 1 do
      local limit = tonumber(a[rules_at + 3 * r])
      local window = tonumber(a[rules_at + 3 * r + 1])
      local bucket = tonumber(a[rules_at + 3 * r + 2])
      local counted = below(numbers_counting(start, r), first)
      -- Folded calls keep no number: every bucket that still counts at the start is counted.
      if bucket > 0 then
        for _, b in ipairs(vt_buckets(meta, window, bucket, now_ms)) do
          if b[1] + window > start then counted = counted + b[2] end
        end
      end
      if counted > limit - cost then
        fits = 0
        break
      end
    end
    replies[g + 1] = fits
  end
  return replies, next_op
end
