# The Java client (clients/java): a Maven project whose messages and stubs are generated from
# protos/ at build time (nothing generated is committed), tested against the shared test stack.
# Maven's repository is .tools/m2; once a build has resolved everything for the current pom,
# later builds run offline.

JAVA_DIR := clients/java
JAVA_M2  := $(CURDIR)/.tools/m2
MVN      ?= mvn
JAVA_MVN  = $(MVN) -B -ntp -f $(JAVA_DIR)/pom.xml -Dmaven.repo.local=$(JAVA_M2)
JAVA_LOG := $(JAVA_DIR)/target/mvn.log

CLIENT_TEST += test-java

.PHONY: test-java java-tools

## java-tools: a JDK (17 or newer) and Maven; Debian's packages when missing (needs root).
java-tools:
	@if command -v javac >/dev/null 2>&1 && command -v $(MVN) >/dev/null 2>&1; then \
		:; \
	elif [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
		echo "installing Debian's openjdk-17-jdk-headless and maven packages"; \
		apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq \
			--no-install-recommends openjdk-17-jdk-headless maven >/dev/null; \
	else \
		echo "a JDK (17 or newer) and Maven are missing: install them (apt-get install" \
			"openjdk-17-jdk-headless maven) or put javac and mvn on PATH"; \
		exit 1; \
	fi

## test-java: build the Java client (stubs from protos/) and run its JUnit tests against a
## real sidecar (python -m sidecar.testing). Maven's full output goes to clients/java/target/mvn.log.
test-java: install java-tools
	@mkdir -p $(JAVA_DIR)/target && rm -rf $(JAVA_DIR)/target/surefire-reports; \
	offline=; if [ $(JAVA_M2)/.resolved -nt $(JAVA_DIR)/pom.xml ]; then offline=-o; fi; \
	echo "test-java: mvn $$offline verify in $(JAVA_DIR) (log: $(JAVA_LOG))"; \
	AGENT_SIDECAR_PYTHON=$(CURDIR)/$(PY) $(JAVA_MVN) $$offline verify >$(JAVA_LOG) 2>&1; rc=$$?; \
	if [ $$rc != 0 ] && [ -n "$$offline" ] && [ ! -d $(JAVA_DIR)/target/surefire-reports ]; then \
		echo "test-java: the offline build failed before testing; again with Maven Central"; \
		AGENT_SIDECAR_PYTHON=$(CURDIR)/$(PY) $(JAVA_MVN) verify >$(JAVA_LOG) 2>&1; rc=$$?; \
	fi; \
	grep -E 'Tests run:|^\[ERROR\] .' $(JAVA_LOG) | grep -vE 'Help 1|full stack trace|-X switch|please read the following|MAVEN/|^\[ERROR\] *->' ; \
	if [ -d $(JAVA_DIR)/target/surefire-reports ]; then touch $(JAVA_M2)/.resolved; fi; \
	exit $$rc
