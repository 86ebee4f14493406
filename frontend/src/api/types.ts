/**
 * The shapes the dashboard reads, taken from the generated schema (schema.ts,
 * made by scripts/gen-api.sh from the server's OpenAPI document), so a server
 * change that breaks the dashboard breaks `tsc` first. The live stream's frames
 * are in live.ts, from the same schema. Only what the schema cannot say is
 * written here: the free-form dictionaries (a channel's `data`, a GPU's holders).
 */
import type { components } from './schema';
import { finalStatusValues, trainingStatusValues } from './schema';

type S = components['schemas'];

export type GPU = S['GPUPublic'];
export type GPUsPublic = S['GPUsPublic'];
export type GPULive = S['GPULive'];
export type GPUProcess = S['GPUProcessPublic'];
export type GPUAvailability = S['GPUAvailabilityPublic'];
export type Host = S['HostPublic'];
export type HostsPublic = S['HostsPublic'];
export type LinkPublic = S['LinkPublic'];
export type HostTopology = S['HostTopology'];
export type Topology = S['TopologyPublic'];

export type Training = S['TrainingPublic'];
export type TrainingHost = S['TrainingHostPublic'];
export type TrainingsPublic = S['TrainingsPublic'];
export type TrainingCreate = S['TrainingCreate'];
export type TrainingEvent = S['TrainingEventPublic'];
export type TrainingMetric = S['TrainingMetricPublic'];
export type TrainingLogs = S['TrainingLogPublic'];
export type TrainingFile = S['TrainingFilePublic'];

export type Session = S['SessionPublic'];
export type SessionCreate = S['SessionCreate'];
export type SessionList = S['SessionList'];
export type Sweep = S['SweepPublic'];
export type SweepDetail = S['SweepDetail'];
export type SweepTrial = S['SweepTrialPublic'];
export type SweepCurves = S['SweepCurvesPublic'];

export type Recipe = S['RecipePublic'];

export type SweepCreate = S['SweepCreate'];
export type TeamUser = S['UserPublic'];
export type UserCreate = S['UserCreate'];
export type UserUpdate = S['UserUpdate'];
export type Token = S['TokenPublic'];
export type TokenCreate = S['TokenCreate'];
export type TokenCreated = S['TokenCreated'];
export type Group = S['GroupPublic'];
export type GroupQuota = S['GroupQuota'];
export type UserQuota = S['UserQuota'];
export type UserQuotaPublic = S['UserQuotaPublic'];
export type Webhook = S['WebhookPublic'];
export type Pool = S['SlurmPoolPublic'];
export type PoolNode = S['PoolNode'];
export type WebhookCreate = S['WebhookCreate'];
export type WebhookCreated = S['WebhookCreated'];

export type Usage = S['UsagePublic'];
export type Booking = S['BookingPublic'];
export type BookingCreate = S['BookingCreate'];
export type BookingConflict = S['BookingConflictPublic'];
export type BookingWindow = S['BookingWindow'];
export type UsageRow = S['UsageRowPublic'];
export type RecipeField = S['RecipeFieldPublic'];
export type RecipesPublic = S['RecipesPublic'];

export type Estimate = S['EstimatePublic'];
export type Candidate = S['CandidatePublic'];
export type RecommendBody = S['RecommendBody'];
export type RecommendResponse = S['RecommendationPublic'];
export type FitBody = S['FitBody'];
export type FitResponse = S['FitPublic'];
export type ValidateBody = S['ValidateBody'];
export type ValidationProblem = S['ProblemPublic'];
export type ValidateResponse = S['ValidationPublic'];

export type HistoryResponse = S['HistoryPublic'];
export type HistorySeries = S['HistorySeries'];
export type HistoryPoint = S['HistoryPoint'];

export type TrainingStatus = S['TrainingStatus'];
/** Every status, in the server's order (gpufleet/db/statuses.py). */
export const TRAINING_STATUSES: readonly TrainingStatus[] = trainingStatusValues;
/** The statuses a training does not leave by itself. */
export const FINAL_STATUSES: ReadonlySet<string> = new Set(finalStatusValues);

/** The seed's AggregatedMetrics, as the live `aggregate` and `host:` channels send it. */
export interface Aggregated {
  total_memory_used: number;
  total_memory_total: number;
  average_utilization: number | null;
  max_temperature: number | null;
  total_power_draw: number | null;
  gpu_count: number;
  reporting_count?: number;
  lost_count?: number;
}

/**
 * A holder in a GPU's availability (a free-form dict in the schema): a
 * gpufleet training's reservation, or a foreign process.
 */
export interface Holder {
  training_id?: string;
  training_name?: string | null;
  name?: string | null;
  owner?: string | null;
  /** recipe | script | session: a session is called a session, and links to the sessions page. */
  kind?: string | null;
  exclusive?: boolean;
  pid?: number;
  user?: string | null;
  command?: string | null;
  used_memory?: number | null;
}
