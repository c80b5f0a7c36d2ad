// The A2A JavaScript SDK's client (@a2a-js/sdk, from npm; `make a2a-tools` installs it into
// .tools/a2a) driving a sidecar over JSON-RPC, its default binding. Run by
// tests/a2a/test_js_client.py against a real sidecar:
//
//   node js_client.mjs BASE_URL
//
// BASE_URL is the sidecar's A2A HTTP listener; A2A_TOOLS names the directory the SDK is
// installed in; ALICE_TOKEN and BOB_TOKEN are two principals' bearer tokens. Each step
// prints one JSON line of what the client saw, which the test judges; a step that throws
// something else than what it expects fails the script.
import { createRequire } from 'node:module';
import { join } from 'node:path';
import { randomUUID } from 'node:crypto';

// The SDK is installed outside this tree, so it is resolved from there (through its own
// package exports) rather than by an import that would look for node_modules beside us.
const sdkRequire = createRequire(join(process.env.A2A_TOOLS, 'package.json'));
const { Role, TaskState } = sdkRequire('@a2a-js/sdk');
const {
  ClientFactory,
  ClientFactoryOptions,
  DefaultAgentCardResolver,
  JsonRpcTransportFactory,
  createAuthenticatingFetchWithRetry,
} = sdkRequire('@a2a-js/sdk/client');
const { A2AError, TaskNotCancelableError, TaskNotFoundError, isJsonRpcError } =
  sdkRequire('@a2a-js/sdk/errors');

const base = process.argv[2];

function report(step, seen) {
  process.stdout.write(JSON.stringify({ step, ...seen }) + '\n');
}

// A client of the card at `base` whose every request carries `token`, as the SDK's
// authentication handler sends it.
async function clientFor(token, clientConfig = {}) {
  const fetchImpl = createAuthenticatingFetchWithRetry(fetch, {
    headers: async () => ({ authorization: `Bearer ${token}` }),
    shouldRetryWithHeaders: async () => undefined,
  });
  const options = ClientFactoryOptions.createFrom(ClientFactoryOptions.default, {
    transports: [new JsonRpcTransportFactory({ fetchImpl })],
    preferredTransports: ['JSONRPC'],
    clientConfig,
  });
  return new ClientFactory(options).createFromUrl(base);
}

function userMessage(text, fields = {}) {
  return {
    message: {
      messageId: randomUUID(),
      role: Role.ROLE_USER,
      parts: [{ content: { $case: 'text', value: text } }],
      ...fields,
    },
  };
}

const stateName = (status) => TaskState[status?.state];
const text = (parts) =>
  parts
    .filter((p) => p.content?.$case === 'text')
    .map((p) => p.content.value)
    .join('');

// An error the client raised, as the test judges it: the SDK's class, the JSON-RPC code
// and the ErrorInfo reason.
function failure(error) {
  if (!(error instanceof A2AError)) {
    throw error;
  }
  return {
    name: error.name,
    reason: error.reason,
    code: isJsonRpcError(error) ? error.envelopeCode : null,
    notFound: error instanceof TaskNotFoundError,
    notCancelable: error instanceof TaskNotCancelableError,
  };
}

async function refused(call) {
  try {
    await call();
  } catch (error) {
    return failure(error);
  }
  throw new Error('the call was expected to fail and did not');
}

// The agent card, as the SDK's resolver fetches it from the well-known path.
const card = await new DefaultAgentCardResolver().resolve(base);
report('card', {
  name: card.name,
  skills: card.skills.map((s) => s.id),
  bindings: card.supportedInterfaces.map((i) => i.protocolBinding),
  version: card.supportedInterfaces.map((i) => i.protocolVersion),
});

const alice = await clientFor(process.env.ALICE_TOKEN);
const bob = await clientFor(process.env.BOB_TOKEN);

// A blocking message: the client waits for the completed task.
const answered = await alice.sendMessage(userMessage('three slow reads please'));
report('blocking', {
  id: answered.id,
  contextId: answered.contextId,
  state: stateName(answered.status),
  answer: text(answered.artifacts[0].parts),
  toolCalls: answered.metadata?.toolCalls,
  history: text(answered.history[0].parts),
});

// A streamed message: the task, then status and artifact updates to the end.
const events = [];
for await (const event of alice.sendMessageStream(userMessage('three slow reads please'))) {
  events.push(event);
}
const statuses = events.filter((e) => e.payload?.$case === 'statusUpdate').map((e) => e.payload.value);
const artifacts = events
  .filter((e) => e.payload?.$case === 'artifactUpdate')
  .map((e) => e.payload.value);
const progress = statuses.flatMap((s) =>
  (s.status?.message?.parts ?? [])
    .filter((p) => p.content?.$case === 'data')
    .map((p) => Object.keys(p.content.value)[0]),
);
const last = artifacts[artifacts.length - 1];
report('streamed', {
  first: events[0].payload?.$case,
  taskIds: [...new Set([events[0].payload.value.id, ...statuses.map((s) => s.taskId)])],
  progress,
  appended: artifacts.filter((a) => a.append).length,
  lastChunk: last.lastChunk,
  answer: text(last.artifact.parts),
  final: stateName(statuses[statuses.length - 1].status),
});

// A task that does not end by itself, started without waiting, fetched by id and cancelled.
const polling = await clientFor(process.env.ALICE_TOKEN, { polling: true });
const started = await polling.sendMessage(userMessage('hang please'));
const fetched = await alice.getTask({ id: started.id });
const cancelled = await alice.cancelTask({ id: started.id });
const again = await refused(() => alice.cancelTask({ id: started.id }));
const after = await alice.getTask({ id: started.id });
report('cancel', {
  started: stateName(started.status),
  fetched: { id: fetched.id, state: stateName(fetched.status) },
  cancelled: stateName(cancelled.status),
  again,
  after: stateName(after.status),
});

// Another principal's task does not exist for Bob; bad input is the spec's error; the
// sidecar still answers afterwards.
const empty = { message: { messageId: randomUUID(), role: Role.ROLE_USER, parts: [] } };
report('errors', {
  othersGet: await refused(() => bob.getTask({ id: answered.id })),
  othersCancel: await refused(() => bob.cancelTask({ id: answered.id })),
  unknownTask: await refused(() => alice.getTask({ id: 'no-such-task' })),
  emptyMessage: await refused(() => alice.sendMessage(empty)),
  badContext: await refused(() =>
    alice.sendMessage(userMessage('two reads', { contextId: 'not a valid id!' })),
  ),
  stillServing: stateName((await alice.sendMessage(userMessage('two reads'))).status),
});

// An approval: the task waits for input; a follow-up message on it answers.
const waiting = await alice.sendMessage(userMessage('Please refund order 20250101'));
const approved = await alice.sendMessage(
  userMessage('approve', { taskId: waiting.id, contextId: waiting.contextId }),
);
report('approval', {
  waiting: stateName(waiting.status),
  sameTask: approved.id === waiting.id,
  done: stateName(approved.status),
});

// A background task, started without waiting and watched afterwards, as a client that
// reconnects does: the stream resumes from the task as it is and runs to its end.
const background = await polling.sendMessage(userMessage('three slow reads please'));
const watched = [];
for await (const event of alice.resubscribeTask({ id: background.id })) {
  watched.push(event);
}
const watchedStatuses = watched
  .filter((e) => e.payload?.$case === 'statusUpdate')
  .map((e) => e.payload.value);
report('reconnected', {
  started: stateName(background.status),
  first: watched[0].payload?.$case,
  final: stateName(watchedStatuses[watchedStatuses.length - 1]?.status ?? watched[0].payload.value.status),
});

// A push notification: the config with the message, delivered when the task ends.
const pushed = await alice.sendMessage({
  ...userMessage('two reads'),
  configuration: {
    taskPushNotificationConfig: {
      url: process.env.PUSH_URL,
      token: 'js-token',
      authentication: { scheme: 'Bearer', credentials: 'js-receiver-secret' },
    },
  },
});
report('push', { id: pushed.id, state: stateName(pushed.status) });

// A caller whose token names no principal is refused before its request is read: HTTP 401,
// which the SDK reports as an HTTP error (it is no A2A error).
const stranger = await clientFor('wrong-token');
try {
  await stranger.getTask({ id: answered.id });
  throw new Error('a wrong token was accepted');
} catch (error) {
  report('unauthenticated', { a2aError: error instanceof A2AError, message: error.message });
}
