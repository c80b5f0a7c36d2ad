package dev.agentsidecar.toolserver;

import com.fasterxml.jackson.databind.ObjectMapper;
import io.grpc.Metadata;
import java.io.IOException;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.attribute.BasicFileAttributes;
import java.time.Clock;
import java.time.Duration;
import java.time.Instant;
import java.util.LinkedHashMap;
import java.util.Map;
import java.util.Objects;
import java.util.logging.Logger;

/**
 * Verifies the identity assertion of each call before its tool runs ({@link
 * ServeOptions#identityKeysFile()} or {@link ServeOptions#identityKeysFrom()}): the assertion by
 * the rule ({@link Assertion}), then that every identity entry of the plain metadata agrees with
 * its claims (step 12), so that a handler
 * reading {@link ToolContext#identity()} cannot be told one thing by the signature and another by
 * the metadata beside it.
 *
 * <p>The sidecar reuses one assertion per run and server, so a verified one is remembered (up to
 * {@value #CACHE_SIZE}, the least recently used forgotten first) and a run's later calls cost a
 * lookup; its expiry is still checked on every call. The keys file is checked for a change at
 * most once a second, on calls: a rotation takes effect within a second and forgets what was
 * verified, while a file that does not load (half written) keeps the keys in use. Keys fetched
 * from a sidecar ({@link IdentityKeysFetcher}) arrive in the background: until the first answer a
 * call carrying an assertion is refused, new keys forget what was verified, and an assertion
 * naming a kid the keys lack asks the fetcher to fetch again soon.
 */
final class IdentityVerifier {
  private static final Logger LOG = Logger.getLogger("dev.agentsidecar.toolserver");
  static final int CACHE_SIZE = 1024;
  private static final long REREAD_NANOS = 1_000_000_000L;

  private final Path file; // null: the keys come from fetcher
  private final IdentityKeysFetcher fetcher; // null: the keys come from file
  private final String audience;
  private final String issuer;
  private final boolean required;
  private final Duration leeway;
  private final Clock clock;
  private final ObjectMapper json;

  // Guarded by this: the keys (null until fetched), what the file looked like when read, and the
  // verified assertions.
  private IdentityKeys keys;
  private FileState seen;
  private long checked;
  private final Map<String, Assertion> verified = new LinkedHashMap<>(64, 0.75f, true) {
    @Override
    protected boolean removeEldestEntry(Map.Entry<String, Assertion> eldest) {
      return size() > CACHE_SIZE;
    }
  };

  /**
   * @throws IllegalArgumentException the keys file cannot be read or holds no usable key
   */
  IdentityVerifier(Path file, String audience, String issuer, boolean required, Duration leeway, Clock clock, ObjectMapper json) {
    this(file, null, audience, issuer, required, leeway, clock, json);
  }

  /** A verifier with the keys {@code fetcher} fetches (it starts it; {@link #close} stops it). */
  IdentityVerifier(IdentityKeysFetcher fetcher, String audience, String issuer, boolean required, Duration leeway, Clock clock,
      ObjectMapper json) {
    this(null, Objects.requireNonNull(fetcher, "fetcher"), audience, issuer, required, leeway, clock, json);
  }

  private IdentityVerifier(Path file, IdentityKeysFetcher fetcher, String audience, String issuer, boolean required,
      Duration leeway, Clock clock, ObjectMapper json) {
    this.file = file;
    this.fetcher = fetcher;
    this.audience = Objects.requireNonNull(audience, "audience");
    this.issuer = Objects.requireNonNull(issuer, "issuer");
    this.required = required;
    this.leeway = Objects.requireNonNull(leeway, "leeway");
    this.clock = clock;
    this.json = json;
    if (fetcher == null) {
      this.seen = FileState.of(file);
      this.keys = IdentityKeys.load(file, json);
      this.checked = System.nanoTime();
    } else {
      fetcher.start();
    }
  }

  /** Stops fetching the keys, if they are fetched. */
  void close() {
    if (fetcher != null) {
      fetcher.close();
    }
  }

  /** The verifier {@code options} configure; null when they configure none. */
  static IdentityVerifier of(ServeOptions options, ObjectMapper json, IdentityKeysFetcher.Timing timing) {
    if (options.identityKeysFrom() != null) {
      IdentityKeysFetcher fetcher;
      try {
        fetcher = new IdentityKeysFetcher(options.identityKeysFrom(), options.identityKeysCa(), json, timing);
      } catch (IllegalArgumentException e) {
        throw new ToolServerException(e.getMessage(), e);
      }
      return new IdentityVerifier(fetcher, options.identityAudience(), options.identityIssuer(),
          options.identityRequired(), options.identityLeeway(), Clock.systemUTC(), json);
    }
    if (options.identityKeysFile() == null) {
      return null;
    }
    try {
      return new IdentityVerifier(Path.of(options.identityKeysFile()), options.identityAudience(), options.identityIssuer(),
          options.identityRequired(), options.identityLeeway(), Clock.systemUTC(), json);
    } catch (IllegalArgumentException e) {
      throw new ToolServerException(e.getMessage(), e);
    }
  }

  /**
   * The verified identity of a call whose request's call id is {@code callId}; without an
   * assertion, when none is required, the plain, unverified one.
   *
   * @throws IdentityRefused the assertion is missing (when required) or fails the rule, or the
   *     metadata is malformed or contradicts it
   */
  CallerIdentity verify(Metadata metadata, String callId) throws IdentityRefused {
    Map<String, Object> found;
    try {
      found = IdentityMetadata.entries(metadata);
    } catch (IdentityMetadata.Malformed e) {
      throw malformed(e);
    }
    String token = (String) found.get(IdentityMetadata.ASSERTION);
    if (token == null) {
      if (required) {
        throw new IdentityRefused("the call carries no identity assertion (" + IdentityMetadata.ASSERTION
            + "); this tool server requires one: the sidecar signs them with auth.tool_assertion");
      }
      try {
        return IdentityMetadata.plain(metadata, callId);
      } catch (IdentityMetadata.Malformed e) {
        throw malformed(e);
      }
    }
    return checkedAgainst(assertion(token), found, callId);
  }

  private Assertion assertion(String token) throws IdentityRefused {
    IdentityKeys current;
    Assertion cached;
    synchronized (this) {
      if (fetcher == null) {
        reread();
      } else {
        fetched();
      }
      current = keys;
      cached = verified.get(token);
    }
    if (current == null) {
      String why = fetcher.lastError();
      throw new IdentityRefused("the identity keys are not fetched yet from " + fetcher.target()
          + " (the sidecar's IdentityKeysService; " + (why == null ? "no answer yet" : "last try: " + why) + ")");
    }
    Instant now = clock.instant();
    if (cached != null) {
      cached.checkNotExpired(leeway, now);
      return cached;
    }
    // Verified outside the lock: a signature check should not queue every other call.
    Assertion fresh;
    try {
      fresh = Assertion.verify(token, current, issuer, audience, leeway, now);
    } catch (IdentityRefused refused) {
      if (refused.unknownKid != null && fetcher != null) {
        fetcher.unknownKid(refused.unknownKid); // a rotation the fetched keys may not show yet
      }
      throw refused;
    }
    synchronized (this) {
      if (keys == current) { // not verified with keys a rotation just dropped
        verified.put(token, fresh);
      }
    }
    return fresh;
  }

  /** Step 12: the identity of a verified assertion, when the plain metadata agrees with it. */
  private static CallerIdentity checkedAgainst(Assertion assertion, Map<String, Object> found, String callId)
      throws IdentityRefused {
    Map<String, String> asserted = Map.of(
        IdentityMetadata.PRINCIPAL, assertion.subject,
        IdentityMetadata.SESSION_ID, assertion.session,
        IdentityMetadata.RUN_ID, assertion.run,
        IdentityMetadata.CALL_ID, callId);
    Map<String, String> labels;
    try {
      labels = found.containsKey(IdentityMetadata.LABELS) ? IdentityMetadata.labels((byte[]) found.get(IdentityMetadata.LABELS)) : null;
    } catch (IdentityMetadata.Malformed e) {
      throw malformed(e);
    }
    for (String key : IdentityMetadata.TEXT_KEYS) {
      if (found.containsKey(key) && !IdentityMetadata.text(found, key).equals(asserted.get(key))) {
        throw new IdentityRefused(key + " contradicts "
            + (key.equals(IdentityMetadata.CALL_ID) ? "the request's call_id" : "the identity assertion"));
      }
    }
    // An entry of null says "too many to send": it agrees only with an absent claim.
    if (found.containsKey(IdentityMetadata.LABELS) && !Objects.equals(labels, assertion.labels)) {
      throw new IdentityRefused(IdentityMetadata.LABELS + " contradicts the identity assertion");
    }
    return new CallerIdentity(assertion.subject, assertion.session, assertion.run, callId,
        assertion.labels == null ? Map.of() : assertion.labels, assertion.labels == null, true, assertion.claims);
  }

  private static IdentityRefused malformed(IdentityMetadata.Malformed e) {
    return new IdentityRefused("the call's identity metadata is malformed: " + e.getMessage());
  }

  /** Takes the fetcher's latest keys; new ones forget what was verified. Called holding this. */
  private void fetched() {
    IdentityKeys latest = fetcher.keys();
    if (latest != keys) {
      keys = latest;
      verified.clear(); // a key may be gone
    }
  }

  /** Loads the keys again when the file changed (a rotation). Called holding this. */
  private void reread() {
    long now = System.nanoTime();
    if (now - checked < REREAD_NANOS) {
      return;
    }
    checked = now;
    FileState state = FileState.of(file);
    if (Objects.equals(state, seen)) {
      return;
    }
    seen = state;
    try {
      keys = IdentityKeys.load(file, json);
    } catch (IllegalArgumentException e) { // half written, or gone: keep the keys we have
      LOG.warning("identity keys not reloaded: " + e.getMessage());
      return;
    }
    verified.clear(); // a key may be gone
    LOG.info("identity keys reloaded from " + file + ": " + keys.size() + " keys");
  }

  /** What tells a rewritten file: modification time, size and inode (a file renamed over it). */
  private record FileState(Object modified, long size, Object fileKey) {
    static FileState of(Path file) {
      try {
        BasicFileAttributes attributes = Files.readAttributes(file, BasicFileAttributes.class);
        return new FileState(attributes.lastModifiedTime(), attributes.size(), attributes.fileKey());
      } catch (IOException e) {
        return null;
      }
    }
  }
}
