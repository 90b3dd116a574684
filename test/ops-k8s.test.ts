// The Kubernetes manifests (deploy/k8s) as the real `kubectl kustomize` renders
// them: each process gets the objects and guards it needs, at full scale no
// PostgreSQL role is past its CONNECTION LIMIT, and the NetworkPolicies let a
// process be reached by its callers only and PostgreSQL by its clients only.
// The limits come from the lane table (shared/lanes.ts), so a change there that
// the manifests do not follow fails here.
import { execFile } from 'node:child_process'
import fs from 'node:fs'
import path from 'node:path'
import { fileURLToPath } from 'node:url'
import { promisify } from 'node:util'
import t from 'tap'
import { parseAllDocuments } from 'yaml'
import { FLEET } from '../shared/fleet.ts'
import { MIN_SHARE } from '../shared/lane-kit/replica-share.ts'
import { DECK_ROLE, JOBS_ROLE, LANE_DEFAULTS, LANE_NAMES, LANE_QUEUES, dbRoles, envPrefix } from '../shared/lanes.ts'

const ROOT = fileURLToPath(new URL('..', import.meta.url))
const IMAGE = 'watertight:0.1.0'

type Labels = Record<string, string>
interface Selector {
  matchLabels?: Labels, matchExpressions?: Array<{ key: string, operator: string, values?: string[] }>
}
interface Obj {
  apiVersion: string
  kind: string
  metadata: { name: string, namespace?: string, labels?: Labels, annotations?: Labels }
  spec?: any
  stringData?: Record<string, string>
  data?: Record<string, string>
}
interface Workload { name: string, kind: string, labels: Labels, annotations: Labels, pod: any, obj: Obj }

function parseYaml (text: string): Obj[] {
  return parseAllDocuments(text).map(d => {
    const [error] = d.errors
    if (error) throw error
    return d.toJS() as Obj | null
  }).filter((o): o is Obj => o !== null)
}

async function render (dir: string): Promise<Obj[]> {
  try {
    const { stdout } = await promisify(execFile)('kubectl', ['kustomize', dir], { cwd: ROOT, maxBuffer: 32 * 1024 * 1024 })
    return parseYaml(stdout)
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code === 'ENOENT') throw new Error('kubectl is not installed: run `bash .ci/system-deps` (Debian\'s kubernetes-client)')
    throw err
  }
}

function selects (sel: Selector | undefined, labels: Labels): boolean {
  for (const [k, v] of Object.entries(sel?.matchLabels ?? {})) if (labels[k] !== v) return false
  for (const e of sel?.matchExpressions ?? []) {
    const has = Object.hasOwn(labels, e.key)
    const inValues = has && (e.values ?? []).includes(labels[e.key]!)
    if (e.operator === 'In' && !inValues) return false
    if (e.operator === 'NotIn' && inValues) return false
    if (e.operator === 'Exists' && !has) return false
    if (e.operator === 'DoesNotExist' && has) return false
    if (!['In', 'NotIn', 'Exists', 'DoesNotExist'].includes(e.operator)) throw new Error(`selector operator ${e.operator}`)
  }
  return true
}

const containers = (w: Workload): any[] => [...(w.pod.initContainers ?? []), ...w.pod.containers]
const main = (w: Workload): any => w.pod.containers[0]
const env = (c: any, name: string): any => (c.env ?? []).find((e: any) => e.name === name)
const envValue = (c: any, name: string): string | undefined => env(c, name)?.value
const portNumber = (c: any, port: number | string): number | undefined => typeof port === 'number' ? port : c.ports?.find((p: any) => p.name === port)?.containerPort

function cpu (q: string | number): number {
  const s = String(q)
  return s.endsWith('m') ? Number(s.slice(0, -1)) / 1000 : Number(s)
}
const MEMORY_UNITS: Record<string, number> = { '': 1, k: 1e3, M: 1e6, G: 1e9, Ki: 2 ** 10, Mi: 2 ** 20, Gi: 2 ** 30 }
function bytes (q: string | number): number {
  const m = /^(\d+)(k|M|G|Ki|Mi|Gi)?$/.exec(String(q))
  if (!m) throw new Error(`memory quantity ${q}`)
  return Number(m[1]) * MEMORY_UNITS[m[2] ?? '']!
}

/** The fleet's pods and NetworkPolicies, and what the policies let through. */
function fleet (objects: Obj[]) {
  const workloads: Workload[] = objects.filter(o => o.kind === 'Deployment' || o.kind === 'Job').map(o => ({
    name: o.metadata.name,
    kind: o.kind,
    labels: o.spec.template.metadata?.labels ?? {},
    annotations: o.spec.template.metadata?.annotations ?? {},
    pod: o.spec.template.spec,
    obj: o,
  }))
  const policies = objects.filter(o => o.kind === 'NetworkPolicy')
  const types = (p: Obj): string[] => p.spec.policyTypes ?? (p.spec.egress ? ['Ingress', 'Egress'] : ['Ingress'])
  const policiesFor = (w: Workload, type: string): Obj[] =>
    policies.filter(p => types(p).includes(type) && selects(p.spec.podSelector, w.labels))
  const workload = (name: string): Workload => {
    const w = workloads.find(x => x.name === name)
    if (!w) throw new Error(`no workload ${name}`)
    return w
  }

  // A peer as a name: a workload of this namespace, `ns:<name>` for every pod
  // of a namespace, `*` for anyone. Any other shape shows as JSON, never as
  // a name the expectations below would accept.
  function peerNames (peer: any): string[] {
    if (peer.ipBlock) return [`ip:${peer.ipBlock.cidr}`]
    if (peer.namespaceSelector) {
      const ml = peer.namespaceSelector.matchLabels ?? {}
      const simple = Object.keys(ml).length === 1 && ml['kubernetes.io/metadata.name'] && !peer.namespaceSelector.matchExpressions
      const ns = simple ? ml['kubernetes.io/metadata.name'] : JSON.stringify(peer.namespaceSelector)
      return [peer.podSelector ? `ns:${ns}/${JSON.stringify(peer.podSelector)}` : `ns:${ns}`]
    }
    return workloads.filter(x => selects(peer.podSelector, x.labels)).map(x => x.name)
  }

  /** Who may open a connection to the workload's pods, sorted. */
  function ingressSources (w: Workload): string[] {
    const pols = policiesFor(w, 'Ingress')
    if (pols.length === 0) return ['(no policy: anyone)']
    const out = new Set<string>()
    for (const p of pols) {
      for (const rule of p.spec.ingress ?? []) {
        if (!rule.from?.length) out.add('*')
        else for (const peer of rule.from) for (const n of peerNames(peer)) out.add(n)
      }
    }
    return [...out].sort()
  }

  /** The ports the ingress rules open on the workload's pods (`all` for a rule without ports). */
  function ingressPorts (w: Workload): Array<number | string> {
    return policiesFor(w, 'Ingress').flatMap(p => (p.spec.ingress ?? []).flatMap((r: any) => r.ports?.length ? r.ports.map((pp: any) => pp.port) : ['all']))
  }

  /** Whether the workload's pods may connect out to `port` anywhere (a pod no Egress policy selects may). */
  function egressAllows (w: Workload, port: number, protocol = 'TCP'): boolean {
    const pols = policiesFor(w, 'Egress')
    if (pols.length === 0) return true
    return pols.some(p => (p.spec.egress ?? []).some((rule: any) => !rule.ports?.length || rule.ports.some((pp: any) =>
      (pp.protocol ?? 'TCP') === protocol && (pp.port === undefined || typeof pp.port === 'string' ||
        (pp.endPort ? pp.port <= port && port <= pp.endPort : pp.port === port)))))
  }

  return { workloads, policies, policiesFor, workload, ingressSources, ingressPorts, egressAllows }
}

// Rendered once; a missing kubectl fails the file with the message to install it.
const objects = await render('deploy/k8s')
const demoObjects = await render('deploy/k8s/demo')
const base = fleet(objects)
const { workloads, workload } = base
const byKind = (kind: string): Obj[] => objects.filter(o => o.kind === kind)
const hpaOf = (name: string): Obj | undefined => byKind('HorizontalPodAutoscaler').find(h => h.spec.scaleTargetRef.kind === 'Deployment' && h.spec.scaleTargetRef.name === name)
const hpaMax = (name: string): number => hpaOf(name)!.spec.maxReplicas

// The long-running processes, with the tier each belongs to and the image's
// process (main.js argument) each runs.
const PROCESSES: Record<string, { tier: string, runs: string }> = {
  gateway: { tier: 'edge', runs: 'gateway' },
  'card-auth': { tier: 'lane', runs: 'card-auth' },
  fraud: { tier: 'lane', runs: 'fraud' },
  tax: { tier: 'lane', runs: 'tax' },
  'worker-fraud': { tier: 'worker', runs: 'worker' },
  'worker-tax': { tier: 'worker', runs: 'worker' },
  deck: { tier: 'admin', runs: 'deck' },
}
const WORKERS = Object.keys(PROCESSES).filter(p => PROCESSES[p]!.tier === 'worker')

t.test('the kustomizations use only what kustomize v2.0.3 (kubectl 1.20) renders like v5', async t => {
  // Fields both versions treat alike; directories in `resources:` came with v2.1.
  const allowed = new Set(['apiVersion', 'kind', 'namespace', 'resources', 'commonLabels', 'images'])
  for (const file of ['deploy/k8s/kustomization.yaml', 'deploy/k8s/demo/kustomization.yaml']) {
    const k = parseYaml(fs.readFileSync(path.join(ROOT, file), 'utf8'))[0] as any
    t.strictSame(Object.keys(k).filter(key => !allowed.has(key)), [], `${file}: no other fields`)
    for (const r of k.resources) t.ok(fs.statSync(path.join(ROOT, path.dirname(file), r)).isFile(), `${file}: ${r} is a file`)
  }
})

t.test('every namespaced object is in the watertight namespace', async t => {
  const namespaces = byKind('Namespace')
  t.strictSame(namespaces.map(n => n.metadata.name), ['watertight'])
  for (const o of [...objects, ...demoObjects].filter(o => o.kind !== 'Namespace')) t.equal(o.metadata.namespace, 'watertight', `${o.kind}/${o.metadata.name}`)
})

t.test('every object says it is part of watertight', async t => {
  for (const o of [...objects, ...demoObjects]) t.equal(o.metadata.labels?.['app.kubernetes.io/part-of'], 'watertight', `${o.kind}/${o.metadata.name}`)
})

t.test('each long-running process has one Deployment, Service, autoscaler and disruption budget, all finding its pods', async t => {
  t.strictSame(byKind('Deployment').map(d => d.metadata.name).sort(), Object.keys(PROCESSES).sort(), 'one Deployment per process, nothing else')
  for (const [name, { tier }] of Object.entries(PROCESSES)) {
    const w = workload(name)
    t.strictSame(w.labels, { 'app.kubernetes.io/name': name, 'app.kubernetes.io/part-of': 'watertight', 'watertight.dev/tier': tier }, `${name}: pod labels`)
    // The Deployment's selector takes its own pods and no other process's.
    t.strictSame(workloads.filter(x => selects(w.obj.spec.selector, x.labels)).map(x => x.name), [name], `${name}: the selector finds its pods only`)

    const services = byKind('Service').filter(s => s.spec.selector && selects({ matchLabels: s.spec.selector }, w.labels))
    t.strictSame(services.map(s => s.metadata.name), [name], `${name}: one Service`)
    for (const p of services[0]?.spec.ports ?? []) t.equal(portNumber(main(w), p.targetPort), main(w).ports[0].containerPort, `${name}: the Service targets the container's port`)

    // The deck has no autoscaler: it runs one pod at a time (its own subtest);
    // nor has tax: its role's budget holds one pod's least share (above).
    const fixed = name === 'deck' || name === 'tax'
    const hpas = byKind('HorizontalPodAutoscaler').filter(h => h.spec.scaleTargetRef.name === name)
    t.equal(hpas.length, fixed ? 0 : 1, `${name}: ${fixed ? 'no' : 'one'} HorizontalPodAutoscaler`)
    for (const h of hpas) {
      t.equal(h.apiVersion, 'autoscaling/v2')
      t.match(h.spec.scaleTargetRef, { apiVersion: 'apps/v1', kind: 'Deployment', name }, `${name}: the autoscaler scales its Deployment`)
      t.ok(h.spec.minReplicas >= 1 && h.spec.minReplicas <= h.spec.maxReplicas, `${name}: ${h.spec.minReplicas}..${h.spec.maxReplicas}`)
      t.ok(h.spec.metrics.some((m: any) => m.type === 'Resource' && m.resource.name === 'cpu' && m.resource.target.type === 'Utilization'), `${name}: scales on CPU utilization`)
    }

    const pdbs = byKind('PodDisruptionBudget').filter(p => selects(p.spec.selector, w.labels))
    t.strictSame(pdbs.map(p => [p.apiVersion, p.metadata.name]), [['policy/v1', name]], `${name}: one PodDisruptionBudget`)
    for (const p of pdbs) t.strictSame(workloads.filter(x => selects(p.spec.selector, x.labels)).map(x => x.name), [name], `${name}: the budget counts its pods only`)
  }
  // Nothing points at a process that is not there.
  for (const h of byKind('HorizontalPodAutoscaler')) t.ok(PROCESSES[h.spec.scaleTargetRef.name], `HPA ${h.metadata.name} targets a process`)
})

t.test('the deck runs one pod at a time, because one deck\'s pool is deck_ds\'s whole limit', async t => {
  const deckLimit = dbRoles({}).find(r => r.role === DECK_ROLE.role)!.connectionLimit
  t.ok(2 * DECK_ROLE.poolMax > deckLimit, 'a second deck would not fit deck_ds')
  const deck = workload('deck').obj
  t.equal(deck.spec.replicas, 1)
  t.equal(deck.spec.strategy?.type, 'Recreate', 'no overlap during a rollout')
  t.equal(hpaOf('deck'), undefined, 'no autoscaler')
})

t.test('every container runs the one image unprivileged, with requests and limits', async t => {
  for (const w of workloads) {
    t.equal(w.pod.automountServiceAccountToken, false, `${w.name}: no service-account token (nothing calls the API server)`)
    for (const c of containers(w)) {
      const id = `${w.name}/${c.name}`
      t.equal(c.image, IMAGE, `${id}: image`)
      const r = c.resources ?? {}
      for (const k of ['requests', 'limits']) for (const q of ['cpu', 'memory']) t.ok(r[k]?.[q] !== undefined, `${id}: ${k}.${q}`)
      t.ok(cpu(r.requests.cpu) <= cpu(r.limits.cpu) && bytes(r.requests.memory) <= bytes(r.limits.memory), `${id}: requests within limits`)
      t.match(c.securityContext, { runAsNonRoot: true, runAsUser: 1000, allowPrivilegeEscalation: false, readOnlyRootFilesystem: true }, `${id}: non-root, read-only, no escalation`)
      t.ok(c.securityContext?.capabilities?.drop?.includes('ALL'), `${id}: drops every capability`)
    }
  }
})

t.test('every long-running process is probed and scraped on its own port', async t => {
  for (const name of Object.keys(PROCESSES)) {
    const w = workload(name)
    const c = main(w)
    const port = c.ports[0].containerPort
    t.equal(c.readinessProbe?.httpGet?.path, '/health/ready', `${name}: readiness`)
    t.equal(portNumber(c, c.readinessProbe?.httpGet?.port), port, `${name}: readiness on ${port}`)
    t.equal(c.livenessProbe?.httpGet?.path, '/health/live', `${name}: liveness`)
    t.equal(portNumber(c, c.livenessProbe?.httpGet?.port), port, `${name}: liveness on ${port}`)
    t.match(w.annotations, { 'prometheus.io/scrape': 'true', 'prometheus.io/port': String(port), 'prometheus.io/path': '/metrics' }, `${name}: Prometheus annotations`)
  }
})

t.test('each process runs its own process name of the image', async t => {
  for (const [name, { runs }] of Object.entries(PROCESSES)) t.strictSame(main(workload(name)).args, [runs], name)
  t.strictSame(main(workload('migrate')).args, ['migrate'])
  // The workers differ only by the queues they serve: the queues their lane owns.
  for (const lane of LANE_NAMES.filter(l => LANE_QUEUES[l].length > 0)) t.equal(envValue(main(workload(`worker-${lane}`)), 'WORKER_QUEUES'), LANE_QUEUES[lane].join(','), `worker-${lane} serves ${lane}'s queues`)
})

t.test('the P0 lane gets more CPU and memory than the P2 lane', async t => {
  const [p0, p2] = [main(workload('card-auth')).resources, main(workload('tax')).resources]
  for (const k of ['requests', 'limits']) {
    t.ok(cpu(p0[k].cpu) > cpu(p2[k].cpu), `${k}.cpu: ${p0[k].cpu} > ${p2[k].cpu}`)
    t.ok(bytes(p0[k].memory) > bytes(p2[k].memory), `${k}.memory: ${p0[k].memory} > ${p2[k].memory}`)
  }
})

t.test('each process holds only its own roles\' credentials, and the gateway none', async t => {
  const users = new Map<string, string[]>()
  for (const w of workloads) {
    for (const c of containers(w)) {
      for (const e of c.env ?? []) {
        const s = e.valueFrom?.secretKeyRef?.name
        if (s?.startsWith('watertight-db-') && !users.get(s)?.includes(w.name)) users.set(s, [...(users.get(s) ?? []), w.name])
      }
    }
  }
  // A lane's Secret is its own (and its worker's, which runs its jobs as its role).
  t.strictSame(Object.fromEntries([...users].map(([s, ws]) => [s, ws.sort()]).sort()), {
    'watertight-db-admin': ['migrate'],
    'watertight-db-card-auth': ['card-auth'],
    'watertight-db-deck': ['deck'],
    'watertight-db-fraud': ['fraud', 'worker-fraud'],
    'watertight-db-jobs': ['worker-fraud', 'worker-tax'],
    'watertight-db-role-passwords': ['migrate'],
    'watertight-db-tax': ['tax', 'worker-tax'],
  })
  for (const lane of LANE_NAMES) t.match(env(main(workload(lane)), 'DATABASE_URL')?.valueFrom?.secretKeyRef, { name: `watertight-db-${lane}`, key: 'url' }, `${lane}: DATABASE_URL`)
  t.notOk(env(main(workload('gateway')), 'DATABASE_URL'), 'the gateway has no DATABASE_URL')
})

t.test('at full scale, a rollout\'s surge pod included, no lane role is past its CONNECTION LIMIT', async t => {
  // A lane's pods share what the role's limit leaves after the workers'
  // reservation (<LANE>_WORKER_POOL_MAX) by heartbeat, each at least MIN_SHARE
  // (shared/lane-kit/replica-share.ts): the most pods there can be, the HPA's
  // maximum (or the fixed replicas) plus the rollout's surge, must each find it.
  // The worker pods running the lane's jobs as its role must fit the reservation.
  for (const lane of LANE_NAMES) {
    const p = envPrefix(lane)
    const limit = LANE_DEFAULTS[lane].poolMax
    const w = workload(lane)
    const c = main(w)
    t.equal(envValue(c, `${p}POOL_MAX`), undefined, `${lane}: the role limit is the lane table's (${limit}), not overridden`)
    t.equal(envValue(c, `${p}REPLICAS`), undefined, `${lane}: no fixed ${p}REPLICAS, the share follows the pods that run`)
    const surge = Number(w.obj.spec.strategy?.rollingUpdate?.maxSurge ?? 0)
    const pods = (hpaOf(lane)?.spec.maxReplicas ?? w.obj.spec.replicas) + surge
    const reserved = Number(envValue(c, `${p}WORKER_POOL_MAX`) ?? (LANE_QUEUES[lane].length > 0 ? 1 : 0))
    let workerMax = 0
    let perWorker = 0
    if (LANE_QUEUES[lane].length > 0) {
      workerMax = hpaMax(`worker-${lane}`)
      perWorker = Math.max(1, Number(envValue(main(workload(`worker-${lane}`)), `${p}WORKER_POOL_MAX`) ?? 1))
      t.ok(workerMax * perWorker <= reserved, `${lane}: worker-${lane}'s ${workerMax} x ${perWorker} fit the ${reserved} reserved`)
    } else {
      t.equal(reserved, 0, `${lane}: owns no queue, reserves nothing`)
    }
    const used = pods * MIN_SHARE + reserved
    t.ok(used <= limit, `${LANE_DEFAULTS[lane].role}: ${pods} pods x ${MIN_SHARE} + ${reserved} reserved = ${used} <= ${limit}`)
  }
})

t.test('all workers together stay within jobs_ds', async t => {
  // Each worker pod takes floor(limit / WORKER_REPLICAS): a pool one smaller,
  // plus its LISTEN connection (services/worker/main.ts). WORKER_REPLICAS is
  // the most worker pods there can be, the workers' HPA maxima together.
  const limit = dbRoles({}).find(r => r.role === JOBS_ROLE.role)!.connectionLimit
  const replicas = new Set(WORKERS.map(w => envValue(main(workload(w)), 'WORKER_REPLICAS')))
  t.equal(replicas.size, 1, 'every worker counts the same fleet')
  const r = Number([...replicas][0])
  t.equal(r, WORKERS.reduce((n, w) => n + hpaMax(w), 0), 'WORKER_REPLICAS is the sum of the workers\' maxReplicas')
  for (const w of WORKERS) t.equal(envValue(main(workload(w)), 'JOBS_POOL_MAX'), undefined, `${w}: jobs_ds's limit is the lane table's`)
  const perPod = Math.max(1, Math.floor(limit / r) - 1) + 1
  t.ok(r * perPod <= limit, `jobs_ds: ${r} x ${perPod} = ${r * perPod} <= ${limit}`)
})

t.test('a rollout never runs more database-holding pods than the budgets count', async t => {
  // The lanes' surge is counted in their shares (above); the workers' and the
  // deck's pools are fixed per pod, so a surge pod at full scale would find
  // its role's limit taken.
  for (const w of workloads.filter(x => x.kind === 'Deployment' && env(main(x), 'DATABASE_URL') && !(LANE_NAMES as readonly string[]).includes(x.name))) {
    const s = w.obj.spec.strategy
    t.ok(s?.type === 'Recreate' || (s?.type === 'RollingUpdate' && [0, '0%'].includes(s.rollingUpdate?.maxSurge)), `${w.name}: maxSurge 0 or Recreate`)
  }
})

t.test('a lane turns unready under memory pressure before the OOM killer ends it', async t => {
  // The lanes' own defaults (2 GiB RSS) are above any of these limits.
  for (const lane of LANE_NAMES) {
    const c = main(workload(lane))
    const p = envPrefix(lane)
    const rss = Number(envValue(c, `${p}PRESSURE_MAX_RSS_BYTES`))
    const heap = Number(envValue(c, `${p}PRESSURE_MAX_HEAP_BYTES`))
    t.ok(rss > 0 && rss < bytes(c.resources.limits.memory), `${lane}: RSS threshold ${rss} below the limit ${c.resources.limits.memory}`)
    t.ok(heap > 0 && heap < rss, `${lane}: heap threshold below the RSS threshold`)
  }
})

t.test('no disruption budget blocks a node drain for good', async t => {
  for (const p of byKind('PodDisruptionBudget')) {
    const name = p.metadata.name
    const fewest = hpaOf(name)?.spec.minReplicas ?? workload(name).obj.spec.replicas
    if (p.spec.minAvailable !== undefined) t.ok(p.spec.minAvailable < fewest, `${name}: minAvailable ${p.spec.minAvailable} < its ${fewest} pods at the fewest`)
    else t.ok(p.spec.maxUnavailable >= 1, `${name}: maxUnavailable ${p.spec.maxUnavailable}`)
  }
})

t.test('ingress is denied by default, and each process is reachable by its callers only', async t => {
  const denyAll = (type: string): boolean => base.policies.some(p => Object.keys(p.spec.podSelector ?? {}).length === 0 && p.spec.policyTypes?.includes(type) && !(type === 'Ingress' ? p.spec.ingress : p.spec.egress)?.length)
  t.ok(denyAll('Ingress'), 'a policy denies all ingress to every pod')
  t.ok(denyAll('Egress'), 'a policy denies all egress of every pod')
  const lane = ['deck', 'gateway', 'ns:monitoring']
  const expected: Record<string, string[]> = {
    gateway: ['*'],
    'card-auth': lane,
    fraud: lane,
    tax: lane,
    'worker-fraud': ['deck', 'ns:monitoring'],
    'worker-tax': ['deck', 'ns:monitoring'],
    // Operators use port-forward, which NetworkPolicy does not see.
    deck: ['ns:monitoring'],
    migrate: [],
  }
  t.strictSame(workloads.map(w => w.name).sort(), Object.keys(expected).sort(), 'every pod is accounted for')
  for (const w of workloads) {
    t.strictSame(base.ingressSources(w), expected[w.name], `${w.name}: reachable from ${expected[w.name]!.join(', ') || 'nobody'}`)
    // No rule opens a port the process does not serve (or every port).
    const served = (w.pod.containers as any[])
      .flatMap(c => (c.ports ?? []).flatMap((p: any) => [p.containerPort, p.name]))
    for (const port of base.ingressPorts(w)) t.ok(served.includes(port), `${w.name}: ingress port ${port} is served`)
  }
})

t.test('only the database clients may reach PostgreSQL, never the gateway', async t => {
  for (const w of workloads) t.ok(base.policiesFor(w, 'Egress').length > 0, `${w.name}: egress is restricted`)
  const reach = workloads.filter(w => base.egressAllows(w, 5432)).map(w => w.name).sort()
  t.strictSame(reach, ['card-auth', 'deck', 'fraud', 'migrate', 'tax', 'worker-fraud', 'worker-tax'])
  t.notOk(base.egressAllows(workload('gateway'), 5432), 'the gateway cannot open a connection to port 5432')
  for (const w of workloads) t.ok(base.egressAllows(w, 53, 'UDP'), `${w.name}: may resolve names`)
  t.ok(base.egressAllows(workload('gateway'), 8101), 'the gateway reaches the lanes')
})

t.test('only the gateway\'s Service is reachable from outside; the deck\'s is ClusterIP', async t => {
  const outside = byKind('Service').filter(s => (s.spec.type ?? 'ClusterIP') !== 'ClusterIP').map(s => s.metadata.name)
  t.strictSame(outside, ['gateway'])
  t.equal(byKind('Service').find(s => s.metadata.name === 'deck')?.spec.type ?? 'ClusterIP', 'ClusterIP')
  t.strictSame(byKind('Ingress'), [], 'no Ingress routes around that')
})

t.test('the lanes\' Services are headless, so the gateway balances over their pods itself', async t => {
  for (const lane of LANE_NAMES) {
    const svc = byKind('Service').find(s => s.metadata.name === lane)
    t.equal(svc?.spec.clusterIP, 'None', `${lane}: headless (its name resolves to each ready pod)`)
    t.notOk(svc?.spec.publishNotReadyAddresses, `${lane}: only ready pods are in its name`)
  }
  const gw = main(workload('gateway'))
  for (const lane of LANE_NAMES) {
    const url = gw.env.find((e: { name: string }) => e.name === `${envPrefix(lane)}URL`)?.value
    t.equal(new URL(url).hostname, lane, `the gateway finds ${lane} by the Service's name`)
  }
})

t.test('migrate provisions every role of the lane table, as the owner, with its password', async t => {
  const c = main(workload('migrate'))
  t.match(env(c, 'DATABASE_URL')?.valueFrom?.secretKeyRef, { name: 'watertight-db-admin', key: 'url' })
  for (const { role } of dbRoles({})) {
    t.match(env(c, `PG_ROLE_PASSWORD_${role.toUpperCase()}`)?.valueFrom?.secretKeyRef, { name: 'watertight-db-role-passwords', key: role }, role)
  }
})

t.test('the tax lane certifies its table before it starts, and a failed certification blocks the rollout', async t => {
  const w = workload('tax')
  const lane = main(w)
  const certFile = envValue(lane, 'TAX_CERTIFICATE_FILE')!
  const init = (w.pod.initContainers ?? []).find((c: any) => c.name === 'tax-certify')
  t.ok(init, 'a tax-certify init container')
  const script = [...(init?.command ?? []), ...(init?.args ?? [])].join(' ')
  t.ok(script.includes(`dist/services/main.js tax-certify --out ${certFile}`), 'writes the certificate the lane reads')
  // ADV-UC-01: uncertified compensation blocks deployment. The command is the
  // certification itself, nothing that could swallow its exit code.
  t.strictSame(init?.command, ['node', 'dist/services/main.js', 'tax-certify', '--out', certFile], 'its exit code is the init container\'s: a failure keeps the pod from starting')
  t.strictSame(env(init, 'TAX_PROVIDER_URL')?.valueFrom, env(lane, 'TAX_PROVIDER_URL')?.valueFrom, 'certifies against the provider the lane quotes from')
  // The root filesystem is read-only: the certificate lives on a shared emptyDir.
  const dir = path.posix.dirname(certFile)
  const mounted = (c: any): string | undefined => c.volumeMounts?.find((m: any) => m.mountPath === dir)?.name
  t.ok(mounted(init) && mounted(init) === mounted(lane), 'the init container and the lane share the directory')
  t.ok(w.pod.volumes.find((v: any) => v.name === mounted(lane))?.emptyDir, 'an emptyDir')
})

t.test('every Secret and ConfigMap key a pod reads is rendered, and the Secrets hold placeholders only', async t => {
  const has = (kind: string, name: string, key: string): boolean => {
    const o = byKind(kind).find(x => x.metadata.name === name)
    return Boolean(o && (Object.hasOwn(o.stringData ?? {}, key) || Object.hasOwn(o.data ?? {}, key)))
  }
  for (const w of workloads) {
    for (const c of containers(w)) {
      for (const e of c.env ?? []) {
        const s = e.valueFrom?.secretKeyRef
        const m = e.valueFrom?.configMapKeyRef
        if (s) t.ok(has('Secret', s.name, s.key), `${w.name}: Secret ${s.name}/${s.key}`)
        if (m) t.ok(has('ConfigMap', m.name, m.key), `${w.name}: ConfigMap ${m.name}/${m.key}`)
      }
    }
    for (const v of w.pod.volumes ?? []) {
      for (const item of v.secret?.items ?? []) t.ok(has('Secret', v.secret.secretName, item.key), `${w.name}: Secret ${v.secret.secretName}/${item.key}`)
    }
  }
  // Never a real secret in the repository: every value says CHANGE_ME.
  for (const s of byKind('Secret')) {
    t.equal(s.data, undefined, `${s.metadata.name}: stringData only`)
    for (const [k, v] of Object.entries(s.stringData ?? {})) t.ok(v.includes('CHANGE_ME'), `${s.metadata.name}/${k} is a placeholder`)
  }
})

t.test('the demo\'s tax sandbox is reached by the tax processes only and reaches no database', async t => {
  t.notOk(objects.some(o => o.metadata.name === 'tax-sandbox'), 'not in the base')
  const demo = fleet([...objects, ...demoObjects])
  const sandbox = demo.workload('tax-sandbox')
  t.strictSame(main(sandbox).args, ['tax-sandbox'])
  t.equal(main(sandbox).image, IMAGE.replace(/^watertight:/, 'watertight-demo:'), 'the demo image (the production one has no sales-tax)')
  t.strictSame(demo.ingressSources(sandbox), ['tax', 'worker-tax'])
  t.notOk(demo.egressAllows(sandbox, 5432), 'no PostgreSQL')
  for (const name of ['tax', 'worker-tax']) t.ok(demo.egressAllows(demo.workload(name), 8190), `${name} reaches it`)
  t.notOk(demo.egressAllows(demo.workload('gateway'), 8190), 'the gateway does not')
  const configured = byKind('ConfigMap').find(c => c.metadata.name === 'watertight-config')?.data?.TAX_PROVIDER_URL
  t.equal(configured, `http://tax-sandbox:${main(sandbox).ports[0].containerPort}`, 'the base\'s default provider is the sandbox')
})

t.test('the optional CloudNativePG cluster gives each role the lane table\'s CONNECTION LIMIT', async t => {
  // Same attributes as migrate's ALTER ROLE, so the operator and migrate never undo each other.
  const docs = parseYaml(fs.readFileSync(path.join(ROOT, 'deploy/k8s/optional/cnpg-cluster.yaml'), 'utf8'))
  const cluster = docs.find(o => o.kind === 'Cluster' && o.apiVersion === 'postgresql.cnpg.io/v1')
  const roles: any[] = cluster?.spec.managed.roles ?? []
  t.strictSame(roles.map(r => r.name).sort(), dbRoles({}).map(r => r.role).sort(), 'the five roles')
  for (const { role, connectionLimit } of dbRoles({})) {
    const r = roles.find(x => x.name === role)
    t.match(r, { ensure: 'present', login: true, superuser: false, createdb: false, createrole: false, inherit: false, connectionLimit }, `${role}: limit ${connectionLimit}`)
    const secret = docs.find(o => o.kind === 'Secret' && o.metadata.name === r?.passwordSecret?.name)
    t.match(secret?.stringData, { username: role, password: /CHANGE_ME/ }, `${role}: placeholder password Secret`)
  }
})

t.test('every process agrees with the fleet table: process, port, health routes, database role', async t => {
  const all = fleet([...objects, ...demoObjects])
  const secretUser = (c: any, name: string): string | undefined => {
    const ref = env(c, name)?.valueFrom?.secretKeyRef
    const secret = [...objects, ...demoObjects].find(o => o.kind === 'Secret' && o.metadata.name === ref?.name) as { stringData: Record<string, string> } | undefined
    return secret ? new URL(String(secret.stringData[ref.key])).username : undefined
  }
  for (const p of FLEET) {
    const c = main(all.workload(p.name))
    t.strictSame(c.args, [p.entry], `${p.name}: runs ${p.entry}`)
    t.equal(c.ports[0].containerPort, p.port, `${p.name}: port ${p.port}`)
    t.ok([undefined, String(p.port)].includes(envValue(c, p.portEnv)), `${p.name}: ${p.portEnv} unset or ${p.port}`)
    t.equal(c.readinessProbe?.httpGet?.path, p.health.ready ?? p.health.live, `${p.name}: readiness route`)
    t.equal(c.livenessProbe?.httpGet?.path, p.health.live, `${p.name}: liveness route`)
    t.equal(secretUser(c, 'DATABASE_URL'), p.role, `${p.name}: DATABASE_URL role ${p.role ?? '(none)'}`)
    if (p.lane) t.equal(secretUser(c, `${envPrefix(p.lane)}DATABASE_URL`), LANE_DEFAULTS[p.lane].role, `${p.name}: runs ${p.lane} jobs as ${LANE_DEFAULTS[p.lane].role}`)
  }
})

t.test('the gateways share their retry limits in the optional Redis, which only they reach', async t => {
  t.notOk(objects.some(o => o.metadata.name === 'redis' && o.kind === 'Deployment'), 'not in the base')
  const redisObjects = await render('deploy/k8s/optional/redis')
  for (const o of redisObjects) t.equal(o.metadata.namespace, 'watertight', `${o.kind} ${o.metadata.name} in the watertight namespace`)
  const withRedis = fleet([...objects, ...redisObjects])
  const redis = withRedis.workload('redis')
  t.equal(redis.obj.spec.replicas, 1, 'one Redis: a second would not share the first\'s counts')
  t.notOk(byKind('HorizontalPodAutoscaler').some(h => h.spec.scaleTargetRef.name === 'redis'), 'and no autoscaler')
  t.match(main(redis).securityContext, { runAsNonRoot: true, allowPrivilegeEscalation: false, readOnlyRootFilesystem: true }, 'unprivileged')
  t.ok(main(redis).resources?.limits?.memory && main(redis).resources?.requests?.cpu, 'with requests and limits')
  const svc = redisObjects.find(o => o.kind === 'Service' && o.metadata.name === 'redis')
  const port = svc?.spec.ports?.[0]?.port
  t.equal(byKind('ConfigMap').find(c => c.metadata.name === 'watertight-config')?.data?.REDIS_URL, `redis://redis:${port}`, 'the base\'s REDIS_URL is its Service')
  const gw = main(workload('gateway'))
  t.match(env(gw, 'REDIS_URL')?.valueFrom, { configMapKeyRef: { name: 'watertight-config', key: 'REDIS_URL' } }, 'the gateway reads REDIS_URL from the ConfigMap')
  t.equal(envValue(gw, 'GATEWAY_REPLICAS'), String(hpaMax('gateway')), 'and shares each limit by the autoscaler\'s maximum while Redis is out')
  t.strictSame(withRedis.ingressSources(redis), ['gateway'], 'Redis is reachable from the gateways only')
  t.strictSame(withRedis.ingressPorts(redis), [port], 'on its port only')
  const reach = withRedis.workloads.filter(w => w.name !== 'redis' && withRedis.egressAllows(w, port)).map(w => w.name)
  t.strictSame(reach, ['gateway'], 'and no other pod may open a connection to its port')
})
