#!/bin/sh
# Make a scratch git repository holding the example project and both plans:
#   examples/refactor/setup.sh [DIR]      (default: a new temporary directory)
# The plans use `isolation: worktree`, which needs their own git repository:
# never run them inside the `team` checkout itself.
set -eu
here=$(cd "$(dirname "$0")" && pwd)
dir=${1:-$(mktemp -d "${TMPDIR:-/tmp}/team-refactor.XXXXXX")}
if [ -e "$dir/.git" ]; then
    echo "setup.sh: $dir is already a git repository; pick a new directory" >&2
    exit 2
fi
mkdir -p "$dir"
cp -R "$here/project/." "$dir/"
cp "$here/plan-offline.yaml" "$here/plan-agent.yaml" "$dir/"
cd "$dir"
git init -q -b main .
git add -A
# An identity only for this commit when none is configured (config untouched).
git config user.name >/dev/null || export GIT_AUTHOR_NAME=team GIT_COMMITTER_NAME=team
git config user.email >/dev/null || export GIT_AUTHOR_EMAIL=team@localhost GIT_COMMITTER_EMAIL=team@localhost
git commit -q -m "shop: initial import"
echo "$dir"
echo "next: cd $dir && team run plan-offline.yaml"
