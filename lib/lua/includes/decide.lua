--[[
  decide: COUNT calls in a row for one key, each asking to start COST slots as early as every rule
  allows. Needs the "log" and "buckets" includes. See docs/design.md for the proof.

  For each rule {LIMIT, WINDOW}, with the log's scores sorted ascending x[0] <= ... <= x[size-1],
  COST more slots fit at t when at most LIMIT - COST scores exceed t - WINDOW: when the binding
  score b = x[size - LIMIT + COST - 1] (if any) has b + WINDOW <= t. So:
  - no rule binds at now: the call starts now;
  - every binding score is known (b <= now): book the slot at t = max(b + WINDOW) and answer the
    wait (the caller sleeps until then: one round trip, no polling);
  - some binding score is still a bound (its call in flight, or booked ahead): book nothing, set
    this process in the key's list of waiting processes (includes/waiters.lua), and answer
    'deferred' with the bound: the next completion (complete.lua) wakes the first waiting process
    (they take turns), which asks again then, or at the bound at the latest.

  SET      the call's rule set (lua/batch.lua): MAX_HOLD (ms after its start a call may still
           reach the vendor: a booked slot's score is START + MAX_HOLD until its completion lowers
           it), RETAIN (ms of history to keep, at least the longest window), the rules {LIMIT,
           WINDOW, BUCKET (ms, 0 = exact)} at RULES_AT in A
  A[I ..]  COST      slots per call (1 .. smallest limit)
           COUNT     calls, followed by COUNT pairs: MAX_DELAY (ms, 'inf' = any), FIRST (the number
                     of the call's first member; members are FIRST .. FIRST+COST-1, each followed by TAG)

  Appends to OUT, per call, five values: status, wait_ms, start_at, rule_index, retry_ms
  status: 1 booked (start in wait_ms), 0 refused (wait_ms: no slot before then), 2 deferred (ask
  again after a completion on the key, or in retry_ms at the latest; no slot before wait_ms).
  rule_index: 0-based index of the rule that set the start, -2 a vendor pause, -1 neither,
  -3 (deferred) a new epoch is not ready yet (live processes are putting back their calls).
]]
-- Whether the log's old completed calls are folded into buckets before the next call of COST: when
-- the log holds more than twice the exact rules' largest limit plus 32 (memory stays bounded), or
-- when some bucketed rule could bind (its log and buckets together leave no room for COST more:
-- the rule then reads its buckets). Until then each call counts by its own release, exactly.
local function vt_fold_due(size, folded, set, cost)
  if size > 2 * set.most_exact + 32 then return true end
  for r, n in pairs(folded) do
    if size + n > set.limits[r] - cost then return true end
  end
  return false
end

-- An empty table, never written: the buckets of a rule set without bucketed rules, or the bounds
-- of a call that none binds.
local vt_none = {}

local function vt_decide(log, meta, now, ready, tag, channel, set, a, i, out)
  local now_ms = math.ceil(now)
  -- What no longer counts at CUT no longer counts at now (NOW_MS, rounded up, may lie just past a
  -- slot's end that a call starting at the reading itself must still see).
  local cut = math.floor(now)
  local cost = tonumber(a[i])
  local count = tonumber(a[i + 1])
  local calls_at = i + 2
  local max_hold, retain = set.max_hold, set.retain
  local rules_at, rule_count = set.rules_at, set.rule_count
  local next_op = calls_at + 2 * count

  local state = redis.call('HMGET', meta, unpack(set.meta_fields))
  local pause = tonumber(state[1] or 0)
  -- Calls in the buckets of each bucketed rule: meta's count as of the last fold, never fewer than
  -- those still counting (buckets change only when calls are folded).
  local folded = vt_none
  if set.bucketed then folded = {} end
  for g, group in ipairs(set.groups) do
    for _, r in ipairs(group.rules) do folded[r] = tonumber(state[2 + g] or 0) end
  end
  local size = redis.call('ZCARD', log)
  -- A booking into an empty log creates the key: it has no time to live yet (PEXPIRE GT would not set one).
  local fresh = false
  local unfolded = set.bucketed
  -- Entries older than the history kept sit below every index a rule looks at: trimming them is
  -- needed only to bound memory, so it waits until the log holds 32 more than the history and the
  -- bookings ahead can count.
  if size > set.trim_above then
    size = size - redis.call('ZREMRANGEBYSCORE', log, '-inf', cut - retain)
  end

  local buckets = set.bucketed and {} or vt_none
  local booked_until = 0
  local waits_until = 0
  for c = 0, count - 1 do
    if unfolded and vt_fold_due(size, folded, set, cost) then
      local folded_until, removed
      folded_until, folded, removed = vt_fold(log, meta, a, rules_at, rule_count, cut)
      -- Buckets count until their end plus the window: meta lives at least that long.
      if folded_until > 0 then vt_keep(meta, folded_until - now) end
      size = size - removed
      unfolded = false
    end
    local max_delay = a[calls_at + 2 * c]
    -- The clock as read, not rounded up: a slot is free now only if it is free at the moment the
    -- call can start, which is after this reading, never before it.
    local start_at = now
    local rule_index = -1
    if pause > now then
      start_at = pause
      rule_index = -2
    end
    -- Binding scores: known ones move the start; bounds (calls in flight) are checked after.
    local pending = nil
    for r = 0, rule_count - 1 do
      local limit = set.limits[r]
      local window = set.windows[r]
      local score = nil
      local free_at = nil
      if folded[r] ~= nil then
        -- Buckets are read only once the log and the buckets together could fill the rule.
        if buckets[r] == nil and size + folded[r] > limit - cost then
          buckets[r] = vt_buckets(meta, window, set.buckets[r], cut)
        end
        if buckets[r] ~= nil then
          local entry
          free_at, entry = vt_bucketed_free_at(log, size, buckets[r], limit, window, cost, now)
          if entry ~= nil then score = tonumber(entry[2]) end
        end
      else
        local index = size - limit + cost - 1
        if index >= 0 then
          score = tonumber(redis.call('ZRANGE', log, index, index, 'WITHSCORES')[2])
          free_at = score + window
        end
      end
      if score ~= nil and score > now_ms then
        pending = pending or {}
        pending[#pending + 1] = { score, window, r }
      elseif free_at ~= nil and free_at > start_at then
        start_at = free_at
        rule_index = r
      end
    end
    -- A bound binds if its window still reaches past the start; the earliest such bound is when
    -- the caller asks again at the latest (by then that score is known). Its call released at
    -- the soonest when it started (bound - MAX_HOLD) or now: no slot before that plus its window.
    local bound = nil
    local earliest = start_at
    for _, p in ipairs(pending or vt_none) do
      if p[1] + p[2] > start_at then
        if bound == nil or p[1] < bound then bound = p[1] end
        local soonest = math.max(now_ms, p[1] - max_hold) + p[2]
        if soonest > earliest then
          earliest = soonest
          rule_index = p[3]
        end
      end
    end

    local wait = 0
    if earliest > now then wait = math.ceil(earliest - now) end
    start_at = math.ceil(start_at)
    local limited = max_delay ~= 'inf' and wait > tonumber(max_delay)
    local reply
    if ready > now_ms then
      local until_ready = math.ceil(ready - now)
      if max_delay ~= 'inf' and until_ready > tonumber(max_delay) then
        reply = { 0, math.max(until_ready, wait), start_at, -2, 0 }
      else
        reply = { 2, until_ready, start_at, -3, until_ready }
      end
    elseif bound ~= nil and (limited or max_delay == '0') then
      -- Cannot wait for the completion: refused, with the soonest a slot could be free.
      reply = { 0, wait, start_at, rule_index, 0 }
    elseif bound ~= nil then
      reply = { 2, wait, start_at, rule_index, math.max(1, math.ceil(bound - now)) }
      waits_until = math.max(waits_until, bound)
    elseif limited then
      reply = { 0, wait, start_at, rule_index, 0 }
    else
      local score = start_at + max_hold
      if size == 0 then fresh = true end
      if cost == 1 then
        -- The usual call: its one member is FIRST as sent.
        redis.call('ZADD', log, score, a[calls_at + 2 * c + 1] .. tag)
      else
        local first = tonumber(a[calls_at + 2 * c + 1])
        -- In chunks: unpack() takes a few thousand values at most, and cost may be as large as a limit.
        for from = 0, cost - 1, 1000 do
          local args = {}
          for k = from, math.min(cost, from + 1000) - 1 do
            args[#args + 1] = score
            args[#args + 1] = string.format('%d', first + k) .. tag
          end
          redis.call('ZADD', log, unpack(args))
        end
      end
      size = size + cost
      booked_until = math.max(booked_until, score)
      reply = { 1, wait, start_at, rule_index, 0 }
    end
    local n = #out
    for rest = c, reply[1] == 2 and count - 1 or c do
      -- A deferred call: the calls after it meet the same state, the same answer.
      for v = 1, 5 do out[n + v] = reply[v] end
      n = n + 5
    end
    if reply[1] == 2 then break end
  end

  if booked_until > 0 then
    -- Every slot the log holds is covered: a later booking's score is the latest but for slots
    -- booked ahead, whose lifetime an earlier PEXPIRE set; GT never shortens it.
    local ttl = math.ceil(booked_until + retain - now)
    if fresh then redis.call('PEXPIRE', log, ttl) else redis.call('PEXPIRE', log, ttl, 'GT') end
  end
  -- This process waits for a completion (in the key's list of waiting processes until its bound),
  -- or no longer does (out of the list, if it was in it).
  if waits_until > 0 or state[2] then vt_waiters_update(meta, state[2], tag, waits_until, now_ms, channel, vt_user_key(log), booked_until > 0) end
  return next_op
end
