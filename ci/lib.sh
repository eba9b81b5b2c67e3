# shellcheck shell=bash
# Helpers shared by the scripts in ci/: messages, step timing, installing what is missing.
# Source it; it sets nothing but functions and FAK_CACHE.

: "${FAK_CACHE:=${HOME}/.cache/fak}"
export FAK_CACHE

log() { printf '==> %s\n' "$*" >&2; }

die() {
    printf 'error: %s\n' "$*" >&2
    exit 1
}

# `apt_install <package>...`: installs the Debian packages with apt-get, refreshing the package
# lists only when the first attempt fails (a fresh CI image may have none, or stale ones).
apt_install() {
    command -v apt-get >/dev/null || die "need Debian packages '$*' but apt-get is missing; install them by hand"
    local sudo=()
    if [[ ${EUID} -ne 0 ]]; then
        command -v sudo >/dev/null || die "need Debian packages '$*': run as root or install sudo"
        sudo=(sudo)
    fi
    log "apt-get install $*"
    export DEBIAN_FRONTEND=noninteractive
    if ! "${sudo[@]}" apt-get install -y --no-install-recommends "$@"; then
        "${sudo[@]}" apt-get update
        "${sudo[@]}" apt-get install -y --no-install-recommends "$@" || die "apt-get install $* failed"
    fi
}

# `need_command <command> <debian-package>`: installs the package unless the command exists.
need_command() {
    command -v "$1" >/dev/null || apt_install "$2"
    command -v "$1" >/dev/null || die "installed $2 but '$1' is still not on PATH"
}

# Step timing: `step <name> <command>...` runs the command in a subshell and records its wall time
# and the CPU time (user + system) it and its children used; on failure it prints the summary so
# far and exits naming the step. CPU time is what a shared or slower machine cannot inflate: on an
# idle 2-core box a well-parallelised step takes about CPU / 2.
STEP_NAMES=()
STEP_SECONDS=()
STEP_CPU_SECONDS=()

step() {
    local name=$1
    shift
    log "step: ${name}"
    local start=${SECONDS} cpu_start rc
    cpu_start=$(children_cpu_seconds)
    # A subshell outside any `||`, so `set -e` still holds inside the step (bash ignores it in
    # anything called from a `||` list). Steps therefore cannot export; main does that.
    set +e
    (
        set -e
        "$@"
    )
    rc=$?
    set -e
    STEP_NAMES+=("${name}")
    STEP_SECONDS+=($((SECONDS - start)))
    STEP_CPU_SECONDS+=($(($(children_cpu_seconds) - cpu_start)))
    if [[ ${rc} -ne 0 ]]; then
        print_step_summary
        die "step '${name}' failed (exit ${rc})"
    fi
}

# User + system seconds of this script's finished (waited-for) children and their descendants:
# cutime + cstime of the top shell ($$ even inside a subshell), fields 16-17 of /proc/<pid>/stat;
# `children_cpu_seconds PID`: of shell PID's (a step's subshell: its ${BASHPID}, read outside
# any command substitution, which is a subshell of its own).
children_cpu_seconds() {
    local stat fields
    stat=$(<"/proc/${1:-$$}/stat")
    read -r -a fields <<<"${stat##*) }" # drop "pid (comm) "; fields[0] is field 3
    echo $(((fields[13] + fields[14]) / $(getconf CLK_TCK)))
}

print_step_summary() {
    local i wall=0 cpu=0
    printf '\n%-28s %8s %8s\n' 'step' 'wall' 'cpu' >&2
    for i in "${!STEP_NAMES[@]}"; do
        printf '%-28s %8s %8s\n' "${STEP_NAMES[i]}" "$(clock "${STEP_SECONDS[i]}")" "$(clock "${STEP_CPU_SECONDS[i]}")" >&2
        wall=$((wall + STEP_SECONDS[i]))
        cpu=$((cpu + STEP_CPU_SECONDS[i]))
    done
    printf '%-28s %8s %8s   (m:ss)\n' 'total' "$(clock "${wall}")" "$(clock "${cpu}")" >&2
}

# Seconds as m:ss.
clock() { printf '%d:%02d' $(($1 / 60)) $(($1 % 60)); }
