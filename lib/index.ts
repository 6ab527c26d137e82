export { Throttle } from './throttle.js';
export type {
  AxiosThrottleHandle,
  AxiosThrottleOptions,
  CallOptions,
  FetchLike,
  FetchResponseLike,
  FetchThrottleOptions,
  PerCall,
  Throttled,
  VendorSignalOptions,
  WrapOptions,
} from './adapters/options.js';
export type { AxiosRequestThrottleOptions } from './adapters/axios-types.js';
export {
  headerValue,
  parseHttpDate,
  parseRateLimitHeaders,
  parseRateLimitReset,
  parseRetryAfter,
  readPublishedLimits,
  readVendorSignal,
} from './vendor-signals.js';
export type {
  HeaderSource,
  ProblemReporter,
  PublishedLimits,
  PublishedPolicy,
  RateLimitHeaderOptions,
  VendorResponseInfo,
  VendorSignal,
} from './vendor-signals.js';
export type { LearnEntry, LearnedLimit, LearnSource } from './learning.js';
export type {
  KeyUsage,
  LimitOptions,
  LimitResult,
  RulesOption,
  ReserveOptions,
  ScheduleOptions,
  StoreErrorPolicy,
  ThrottleMode,
  ThrottleEvents,
  ThrottleOptions,
  ThrottleStats,
} from './options.js';
export { formatRule, parseRule, parseRules } from './rules.js';
export type { Rule, RuleInput, RuleString, RuleUnit } from './rules.js';
export type { KeyInput, KeysInput } from './keys.js';
export {
  DEFAULT_WAIT_BUCKETS,
  loadPromClient,
  throttleMetrics,
  type MetricsSource,
  type PromClientLike,
  type PromCounterLike,
  type PromGaugeLike,
  type PromHistogramLike,
  type PromLabels,
  type PromMetricConfig,
  type PromRegistryLike,
  type ThrottleMetricNames,
  type ThrottleMetrics,
  type ThrottleMetricsOptions,
} from './metrics.js';
export { MemoryStore } from './stores/memory-store.js';
export type { MemoryStoreOptions } from './stores/memory-store.js';
export { RedisStore } from './stores/redis-store.js';
export type { RedisClientLike, RedisStoreOptions } from './stores/redis-options.js';
export type {
  ClaimRequest,
  ClaimResult,
  ClaimStatus,
  InspectResult,
  LearnResult,
  ReserveRequest,
  ReserveResult,
  RestoredSlot,
  RuleUsage,
  Settlement,
  Store,
  StoreNotice,
} from './store.js';
export type { Dependency } from './slot-plan.js';
export {
  CallTimeoutError,
  QueueFullError,
  RateLimitedError,
  ReservationError,
  StoreUnavailableError,
  ThrottleClosedError,
  ThrottleConfigError,
  ThrottleError,
} from './errors.js';
export type { ReservationProblem, ThrottleErrorCode, WaitReason } from './errors.js';
export type { Reservation } from './reservations.js';
