--[[
  batch: the decisions and completions one process has for Redis at one moment, in one atomic
  step: operations on several keys (a standalone Redis), or on one key (a Cluster, where one
  script only reaches keys of one slot). Each operation is described in its include.

  KEYS     for each key used, its two keys: log, meta (includes/log.lua); then, when EPOCH is not
           empty, the namespace's epoch key (epoch.lua)
  ARGV[1]  EPOCH    the epoch value the caller knows ('' = no check)
  ARGV[2]  TAG      this process's member suffix (members are <number><TAG>), which also names it
                    in a key's list of waiting processes
  ARGV[3]  CHANNEL  the namespace's channel prefix: a completion wakes a waiting process on
                    CHANNEL followed by the process's tag
  ARGV[4]  GRACE    ms a key is held once found to have lost data (includes/check.lua)
  ARGV[5]  FIELDS   everything else, as one string of comma-separated fields, each followed by a
                    comma (one argument costs the client far less to send than hundreds); its
                    fields are read as A[5], A[6], … below (A[1 .. 4] are ARGV[1 .. 4]):
  A[5]     S        number of rule sets, followed by S sets: MAX_HOLD, RETAIN, R, then R triples
                    LIMIT, WINDOW, BUCKET (includes/decide.lua)
           then the operations, to the end of A, each starting with K (the key: KEYS[2K-1 .. 2K]):
             K > 0   decide: K, SET (1-based), COST, COUNT, then COUNT pairs MAX_DELAY, FIRST
             K = 0   decide one call in several keys at once (a standalone Redis, or keys of one
                     slot): 0, N, then N pairs K, SET, then COST, MAX_DELAY, FIRST
             K < 0   complete: -K, N, then N pairs NUMBER, RELEASE_AT (includes/complete.lua);
                     N = 0: this process no longer waits on the key (it leaves the key's waiting list);
                     N = -1: check the key: -K, -1, NUMBER, SCORE, KEY_UNTIL
                     (includes/check.lua), before the key's decisions; N = -2: the same, FULL
                     (the heartbeat's check of a key no decision follows);
                     N = -3: tidy the key: -K, -3, RETAIN (includes/complete.lua), after its
                     other operations
           A decision on a key found lost (check status 1) is not made: its calls are answered
           status 3. On a key held (status 2) it is made, and waits for the hold (decide.lua).

  Returns { 3 } when the epoch changed (the store lost its data; nothing was done), else
  { 1, NOW_MS, then five values per decided call in order, then one per check (includes/check.lua) }:
  NOW_MS is the store clock (0 when no decision or check was asked for).
]]
--- @include "log"
--- @include "buckets"
--- @include "waiters"
--- @include "decide"
--- @include "complete"
--- @include "check"

-- A keeps ARGV's layout: ARGV[1 .. 4], then the fields of ARGV[5] (empty ones too: a release of
-- '' removes a slot, includes/complete.lua).
local A = { ARGV[1], ARGV[2], ARGV[3], ARGV[4] }
for field in string.gmatch(ARGV[5], '([^,]*),') do A[#A + 1] = field end

local epoch_key = nil
if A[1] ~= '' then epoch_key = KEYS[#KEYS] end
local ready = vt_epoch(epoch_key, A[1])
if ready == 'lost' then return { 3 } end

local tag, channel = A[2], A[3]
local sets = {}
local i = 6
for n = 1, tonumber(A[5]) do
  local rule_count = tonumber(A[i + 2])
  local set = { max_hold = tonumber(A[i]), retain = tonumber(A[i + 1]), rule_count = rule_count, rules_at = i + 3, most = 0, most_exact = 0, bucketed = false, meta_fields = { 'pause', 'w', 'h', 'r' }, groups = {}, limits = {}, windows = {}, buckets = {} }
  local by_prefix = {}
  local longest = 1
  for r = 0, rule_count - 1 do
    local limit = tonumber(A[i + 3 + 3 * r])
    local window = tonumber(A[i + 4 + 3 * r])
    -- Parsed once per batch: every decision of the set reads them.
    set.limits[r], set.windows[r], set.buckets[r] = limit, window, tonumber(A[i + 5 + 3 * r])
    set.most = math.max(set.most, limit)
    longest = math.max(longest, window)
    if A[i + 5 + 3 * r] ~= '0' then
      -- A bucketed rule's (WINDOW, BUCKET): meta's count of calls in its buckets is read with the state.
      set.bucketed = true
      local prefix = 'b:' .. tonumber(A[i + 4 + 3 * r]) .. ':' .. tonumber(A[i + 5 + 3 * r]) .. ':'
      local group = by_prefix[prefix]
      if group == nil then
        group = { rules = {} }
        by_prefix[prefix] = group
        set.groups[#set.groups + 1] = group
        set.meta_fields[#set.meta_fields + 1] = prefix .. 'n'
      end
      group.rules[#group.rules + 1] = r
    else
      set.most_exact = math.max(set.most_exact, limit)
    end
  end
  -- A key that may fold reads its meta `f` with its state (a fold never lowers it).
  if set.bucketed then
    set.meta_fields[#set.meta_fields + 1] = 'f'
    set.f_at = #set.meta_fields
  end
  -- The history kept (RETAIN, k longest windows) and the slots booked ahead (a window at most) hold
  -- at most (k + 1) × the largest limit: 32 more, and the log is trimmed.
  set.trim_above = set.most * (math.ceil(set.retain / longest) + 1) + 32
  sets[n] = set
  i = i + 3 + 3 * rule_count
end

local now = nil
local out = { 1, 0 }
local last = #A
-- Keys whose check failed (by K), and the checks' answers. ENV: what a key's check or decision needs
-- besides its own arguments (the replication id is read with the clock).
local lost = {}
local checks = {}
local env = { grace = tonumber(A[4]), replid = '' }
-- A status-3 answer per call: a decision on a key that lost its data is not made.
local function vt_not_made(calls)
  for c = 1, calls do
    local n = #out
    out[n + 1], out[n + 2], out[n + 3], out[n + 4], out[n + 5] = 3, 0, 0, 0, 0
  end
end
while i <= last do
  local k = tonumber(A[i])
  local check = k < 0 and (A[i + 1] == '-1' or A[i + 1] == '-2')
  local tidy = k < 0 and A[i + 1] == '-3'
  if k >= 0 or check or tidy then
    -- Completions come first in a batch and need no clock: TIME only when a decision or check needs it.
    if now == nil then
      now = vt_now()
      out[2] = math.ceil(now)
      env.replid = vt_replid()
    end
  end
  if k > 0 and lost[k] then
    local count = tonumber(A[i + 3])
    vt_not_made(count)
    i = i + 4 + 2 * count
  elseif k > 0 then
    i = vt_decide(KEYS[2 * k - 1], KEYS[2 * k], now, ready, tag, channel, sets[tonumber(A[i + 1])], A, i + 2, out, env)
  elseif k == 0 then
    local n = tonumber(A[i + 1])
    local whole = true
    for e = 0, n - 1 do
      if lost[tonumber(A[i + 2 + 2 * e])] then whole = false end
    end
    local at = i + 2 + 2 * n
    if whole then
      local keys = {}
      local cut = math.floor(now)
      for e = 0, n - 1 do
        local kk = tonumber(A[i + 2 + 2 * e])
        keys[e + 1] = vt_key_open(KEYS[2 * kk - 1], KEYS[2 * kk], sets[tonumber(A[i + 3 + 2 * e])], cut, now, env)
      end
      vt_decide_keys(keys, now, ready, tag, channel, tonumber(A[at]), A[at + 1], A[at + 2], A, out)
    else
      vt_not_made(1)
    end
    i = at + 3
  elseif check then
    local status
    status, i = vt_check(KEYS[-2 * k - 1], KEYS[-2 * k], tag, now, env.grace, env.replid, A, i + 2, A[i + 1] == '-2')
    if status == 1 then lost[-k] = true end
    checks[#checks + 1] = status
  elseif tidy then
    vt_tidy(KEYS[-2 * k - 1], KEYS[-2 * k], now, tonumber(A[i + 2]))
    i = i + 3
  else
    i = vt_complete(KEYS[-2 * k - 1], KEYS[-2 * k], tag, channel, A, i + 1)
  end
end
for _, status in ipairs(checks) do out[#out + 1] = status end
return out
