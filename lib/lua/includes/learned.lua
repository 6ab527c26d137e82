--[[
  learned: the limits a key learned from its vendor (Throttle.learn, lua/learn.lua), kept in its
  meta's field `l` as entries LIMIT:WINDOW:LAPSE:SOURCE joined by ',' (LAPSE: store clock ms after
  which the entry no longer applies; SOURCE: one letter, lib/learning.ts), and for one learned from
  refusals (`r`, or `R` down from a limit above the rule) :SINCE:N (when its window of refusals began,
  and the refusals in it). A learned limit
  lowers: a decision counts the key under the tighter of each rule and what was learned for its
  window (what was learned, when SOURCE is a capital: a published limit the user let apply above the
  rules, learnAboveRules), and under a learned limit of another window as a rule of its own (within the history the
  key keeps). Needs nothing else.
]]

-- The entries of TEXT that still apply at NOW: { limit, window, lapse, source } each, by window.
local function vt_learned_parse(text, now)
  local entries = {}
  if text == nil or text == false then return entries end
  for limit, window, lapse, source, since, n in string.gmatch(text, '(%d+):(%d+):(%d+):(%a):?(%d*):?(%d*)') do
    lapse = tonumber(lapse)
    if lapse > now then entries[#entries + 1] = { math.max(1, tonumber(limit)), tonumber(window), lapse, source, tonumber(since) or 0, tonumber(n) or 0 } end
  end
  return entries
end

local function vt_learned_format(entries)
  local parts = {}
  for e, entry in ipairs(entries) do
    parts[e] = string.format('%d:%d:%d:%s', entry[1], entry[2], entry[3], entry[4])
    if entry[4] == 'r' or entry[4] == 'R' then parts[e] = parts[e] .. string.format(':%d:%d', entry[5], entry[6]) end
  end
  return table.concat(parts, ',')
end

-- Appends ENTRIES to OUT as a reply reads them (lib/stores/redis-scripts.ts): LIMIT, WINDOW,
-- LAPSE_IN_MS (from NOW_MS), SOURCE each.
local function vt_learned_reply(entries, now_ms, out)
  for _, entry in ipairs(entries) do
    out[#out + 1] = entry[1]
    out[#out + 1] = entry[2]
    out[#out + 1] = entry[3] - now_ms
    out[#out + 1] = entry[4]
  end
end

-- The limit in force for a window whose configured limit is LIMIT, given its learned ENTRY (or nil).
local function vt_learned_limit(limit, entry)
  if not entry then return limit end
  if string.byte(entry[4]) < 97 then return entry[1] end
  return math.min(limit, entry[1])
end

-- The limit in force for a window whose configured limit is CONFIG (0: a window no rule has, where
-- it is the learned ENTRY's, or none: math.huge).
local function vt_learned_in_force(config, entry)
  if config > 0 then return vt_learned_limit(config, entry) end
  if entry then return entry[1] end
  return math.huge
end

-- SET (a rule set of lua/batch.lua) with the learned limits of TEXT applied at NOW, or SET itself
-- when none applies. The copy shares everything else with SET; its rules past CONFIG_COUNT are
-- learned ones (a decision they bind answers VT_RULE_LEARNED).
local function vt_learned_set(set, text, now)
  local entries = vt_learned_parse(text, now)
  if #entries == 0 then return set end
  local limits, windows, buckets = {}, {}, {}
  for r = 0, set.rule_count - 1 do
    limits[r], windows[r], buckets[r] = set.limits[r], set.windows[r], set.buckets[r]
  end
  local count = set.rule_count
  -- A learned rule of another window is exact: a fold keeps its window in the log.
  local horizon = 0
  for _, entry in ipairs(entries) do
    local limit, window = entry[1], entry[2]
    local found = false
    for r = 0, set.rule_count - 1 do
      if windows[r] == window then
        found = true
        limits[r] = vt_learned_limit(limits[r], entry)
      end
    end
    if not found and window <= set.retain then
      limits[count], windows[count], buckets[count] = limit, window, 0
      count = count + 1
      horizon = math.max(horizon, window)
    end
  end
  local learned = setmetatable({ limits = limits, windows = windows, buckets = buckets, rule_count = count, learned_horizon = horizon }, { __index = set })
  local room = math.huge
  for r = 0, count - 1 do room = math.min(room, limits[r]) end
  learned.room = room
  return learned
end
