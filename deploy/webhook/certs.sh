#!/bin/sh
# deploy/webhook/certs.sh - egpu-webhook's serving certificate without
# cert-manager (docs/webhook.md, "Install").
#
#   sh deploy/webhook/certs.sh [--dry-run] [--dir DIR] [options]
#
# 1. Makes a CA (ECDSA P-256, self-signed, --ca-days, default 3650 days) and a
#    serving certificate signed by it (--days, default 365) for the Service:
#    SANs SERVICE, SERVICE.NS, SERVICE.NS.svc (the name the API server
#    verifies) and SERVICE.NS.svc.cluster.local.
# 2. Creates or replaces the Secret egpu-webhook-tls (tls.crt, tls.key,
#    ca.crt) in NS, which deployment.yaml mounts; egpu-webhook re-reads the
#    files when the kubelet updates them, with no restart.
# 3. Patches clientConfig.caBundle of every webhook of the
#    MutatingWebhookConfiguration and the ValidatingWebhookConfiguration
#    elastic-gpu-webhook. The bundle holds the new CA and the first CA of
#    the bundle there before, so calls verify both while the pods still
#    serve the old certificate (the kubelet takes up to a minute or so to
#    update a Secret volume). So apply deploy/ first, then run this.
#
# Run it again to renew, before the serving certificate expires (it prints
# the date). Every step is printed, each kubectl command as it is run.
#
# Options:
#   --dry-run        run no kubectl: write the files (ca.crt, ca.key, tls.crt,
#                    tls.key, secret.yaml, mutating-patch.json,
#                    validating-patch.json) to --dir and print the commands
#                    that would apply them; needs --dir
#   --dir DIR        keep the files in DIR (created, mode 0700); without it a
#                    temporary directory is used and removed at the end (the
#                    CA key is then discarded: renewal makes a new CA, which
#                    step 3 handles)
#   --namespace NS   the webhook's namespace (default elastic-gpu-system)
#   --service NAME   its Service (default egpu-webhook)
#   --secret NAME    the TLS Secret (default egpu-webhook-tls)
#   --config NAME    the webhook configurations (default elastic-gpu-webhook)
#   --days N         serving certificate lifetime in days (default 365)
#   --ca-days N      CA lifetime in days (default 3650)
# Environment: KUBECTL (default kubectl), e.g. KUBECTL="kubectl --context prod".
# Needs openssl (1.1.1 or 3.x); kubectl unless --dry-run.
set -eu

NS=elastic-gpu-system
SERVICE=egpu-webhook
SECRET=egpu-webhook-tls
CONFIG=elastic-gpu-webhook
DAYS=365
CA_DAYS=3650
DIR=
DRY_RUN=false
KUBECTL=${KUBECTL:-kubectl}
# The webhooks of each configuration in webhooks.yaml, for --dry-run (a
# live run counts them on the cluster).
DRY_MUTATING=3
DRY_VALIDATING=2

say() { printf 'certs.sh: %s\n' "$*"; }
die() {
    printf 'certs.sh: %s\n' "$*" >&2
    exit 2
}
usage() {
    sed -n '2,/^set -eu$/{/^set -eu$/d;s/^# \{0,1\}//;p}' "$0"
    exit "$1"
}
posint() {
    case "$2" in
    '' | *[!0-9]* | 0*) die "$1 is '$2'; allowed: a whole number of days from 1" ;;
    esac
}
name() {
    case "$2" in
    '' | *[!a-z0-9.-]* | [.-]* | *[.-]) die "$1 is '$2'; allowed: a DNS name (a-z, 0-9, '-', '.')" ;;
    esac
}

while [ $# -gt 0 ]; do
    case "$1" in
    --dry-run) DRY_RUN=true ;;
    --dir | --namespace | --service | --secret | --config | --days | --ca-days)
        [ $# -ge 2 ] || die "$1 needs a value"
        case "$1" in
        --dir) DIR=$2 ;;
        --namespace) NS=$2 ;;
        --service) SERVICE=$2 ;;
        --secret) SECRET=$2 ;;
        --config) CONFIG=$2 ;;
        --days) DAYS=$2 ;;
        --ca-days) CA_DAYS=$2 ;;
        esac
        shift
        ;;
    -h | --help) usage 0 ;;
    *) die "unknown argument '$1' (--help lists the options)" ;;
    esac
    shift
done
posint --days "$DAYS"
posint --ca-days "$CA_DAYS"
name --namespace "$NS"
name --service "$SERVICE"
name --secret "$SECRET"
name --config "$CONFIG"
command -v openssl >/dev/null 2>&1 || die "openssl is not installed"
if $DRY_RUN; then
    [ -n "$DIR" ] || die "--dry-run needs --dir DIR (where the files go)"
else
    # shellcheck disable=SC2086
    command -v ${KUBECTL%% *} >/dev/null 2>&1 || die "kubectl ('$KUBECTL') is not installed"
fi

umask 077
if [ -n "$DIR" ]; then
    mkdir -p "$DIR"
    chmod 700 "$DIR"
else
    DIR=$(mktemp -d "${TMPDIR:-/tmp}/egpu-webhook-certs.XXXXXX")
    trap 'rm -rf "$DIR"' EXIT
fi

HOST=$SERVICE.$NS.svc
say "files in $DIR"

# --- 1. the CA and the serving certificate -----------------------------------
cat >"$DIR/openssl.cnf" <<EOF
[ req ]
distinguished_name = dn
prompt = no
[ dn ]
CN = unused
[ ca ]
basicConstraints = critical, CA:TRUE, pathlen:0
keyUsage = critical, keyCertSign, cRLSign
subjectKeyIdentifier = hash
[ serving ]
basicConstraints = critical, CA:FALSE
keyUsage = critical, digitalSignature
extendedKeyUsage = serverAuth
subjectKeyIdentifier = hash
authorityKeyIdentifier = keyid
subjectAltName = DNS:$SERVICE, DNS:$SERVICE.$NS, DNS:$HOST, DNS:$HOST.cluster.local
EOF

say "making a CA: CN=$SERVICE-ca, ECDSA P-256, $CA_DAYS days"
openssl genpkey -algorithm EC -pkeyopt ec_paramgen_curve:P-256 -out "$DIR/ca.key" 2>/dev/null
openssl req -new -x509 -config "$DIR/openssl.cnf" -extensions ca -key "$DIR/ca.key" \
    -subj "/CN=$SERVICE-ca" -days "$CA_DAYS" -sha256 -out "$DIR/ca.crt"

say "making the serving certificate: CN=$HOST, SANs $SERVICE, $SERVICE.$NS, $HOST, $HOST.cluster.local, $DAYS days"
openssl genpkey -algorithm EC -pkeyopt ec_paramgen_curve:P-256 -out "$DIR/tls.key" 2>/dev/null
openssl req -new -config "$DIR/openssl.cnf" -key "$DIR/tls.key" -subj "/CN=$HOST" \
    -out "$DIR/tls.csr"
openssl x509 -req -in "$DIR/tls.csr" -CA "$DIR/ca.crt" -CAkey "$DIR/ca.key" \
    -set_serial "0x$(openssl rand -hex 16)" -days "$DAYS" -sha256 \
    -extfile "$DIR/openssl.cnf" -extensions serving -out "$DIR/tls.crt" 2>/dev/null
rm -f "$DIR/tls.csr"
openssl verify -CAfile "$DIR/ca.crt" -purpose sslserver "$DIR/tls.crt" >/dev/null ||
    die "the new certificate does not verify against the new CA"
say "the serving certificate expires $(openssl x509 -in "$DIR/tls.crt" -noout -enddate | cut -d= -f2); run this again before then"

# --- 2. the Secret ------------------------------------------------------------
b64() { openssl base64 -A -in "$1"; }
cat >"$DIR/secret.yaml" <<EOF
apiVersion: v1
kind: Secret
type: kubernetes.io/tls
metadata:
  name: $SECRET
  namespace: $NS
  labels:
    app.kubernetes.io/name: egpu-webhook
    app.kubernetes.io/component: webhook
    app.kubernetes.io/part-of: elastic-gpu
data:
  tls.crt: $(b64 "$DIR/tls.crt")
  tls.key: $(b64 "$DIR/tls.key")
  ca.crt: $(b64 "$DIR/ca.crt")
EOF

# --- 3. caBundle --------------------------------------------------------------
# The first certificate of a PEM bundle (base64 of PEM, as in caBundle) on
# stdin, as PEM; nothing if there is none.
first_cert() {
    openssl base64 -d -A 2>/dev/null |
        sed -n '/-----BEGIN CERTIFICATE-----/,/-----END CERTIFICATE-----/{p;/-----END CERTIFICATE-----/q;}'
}

# patch KIND COUNT OLD_BUNDLE_PEM_FILE OUT: a JSON patch setting caBundle of
# webhooks 0..COUNT-1 to the new CA followed by the old one.
make_patch() {
    cat "$DIR/ca.crt" "$3" >"$DIR/bundle.pem"
    bundle=$(b64 "$DIR/bundle.pem")
    i=0
    printf '[' >"$4"
    while [ "$i" -lt "$2" ]; do
        [ "$i" -eq 0 ] || printf ',' >>"$4"
        printf '{"op":"add","path":"/webhooks/%d/clientConfig/caBundle","value":"%s"}' \
            "$i" "$bundle" >>"$4"
        i=$((i + 1))
    done
    printf ']\n' >>"$4"
    rm -f "$DIR/bundle.pem"
}

run() {
    say "run: $*"
    "$@"
}

: >"$DIR/old-mutating.pem"
: >"$DIR/old-validating.pem"
if $DRY_RUN; then
    make_patch mutating "$DRY_MUTATING" "$DIR/old-mutating.pem" "$DIR/mutating-patch.json"
    make_patch validating "$DRY_VALIDATING" "$DIR/old-validating.pem" "$DIR/validating-patch.json"
    rm -f "$DIR/old-mutating.pem" "$DIR/old-validating.pem" "$DIR/openssl.cnf"
    say "dry run: nothing sent to the cluster; these would be run:"
    say "  $KUBECTL apply -f $DIR/secret.yaml"
    say "  $KUBECTL patch mutatingwebhookconfiguration $CONFIG --type=json --patch-file $DIR/mutating-patch.json"
    say "  $KUBECTL patch validatingwebhookconfiguration $CONFIG --type=json --patch-file $DIR/validating-patch.json"
    say "(the patches set caBundle of $DRY_MUTATING and $DRY_VALIDATING webhooks, as in deploy/webhook/webhooks.yaml)"
    exit 0
fi

for kind in mutating validating; do
    res=${kind}webhookconfiguration
    say "reading $res $CONFIG"
    # kubectl's own error decides what to say: the API server's NotFound
    # means deploy/ is not applied; anything else (no cluster reachable, no
    # kubeconfig, no rights) is quoted as kubectl summed it up.
    # shellcheck disable=SC2086
    if ! names=$($KUBECTL get "$res" "$CONFIG" \
        -o jsonpath='{range .webhooks[*]}{.name}{"\n"}{end}' 2>"$DIR/kubectl.err"); then
        if grep -q '(NotFound)' "$DIR/kubectl.err"; then
            die "$res $CONFIG not found: apply deploy/ first (kubectl apply -k deploy/)"
        fi
        # kubectl's last line is its summary (klog's retries come before it).
        die "cannot read $res $CONFIG from the cluster: $KUBECTL: $(grep . "$DIR/kubectl.err" | tail -n 1 | cut -c 1-500) (check that the kubeconfig, or KUBECTL, names a reachable cluster)"
    fi
    count=$(printf '%s\n' "$names" | grep -c . || true)
    [ "$count" -gt 0 ] || die "$res $CONFIG has no webhooks"
    # shellcheck disable=SC2086
    $KUBECTL get "$res" "$CONFIG" -o jsonpath='{.webhooks[0].clientConfig.caBundle}' |
        first_cert >"$DIR/old-$kind.pem"
    if [ -s "$DIR/old-$kind.pem" ]; then
        say "$res $CONFIG: keeping its current CA in the bundle beside the new one"
    fi
    make_patch "$kind" "$count" "$DIR/old-$kind.pem" "$DIR/$kind-patch.json"
done

# caBundle first, so the API server already trusts the new CA when a pod
# starts serving the new certificate.
for kind in mutating validating; do
    # shellcheck disable=SC2086
    run $KUBECTL patch "${kind}webhookconfiguration" "$CONFIG" --type=json \
        --patch-file "$DIR/$kind-patch.json"
done
# shellcheck disable=SC2086
run $KUBECTL apply -f "$DIR/secret.yaml"
say "done: Secret $NS/$SECRET and the caBundle of $CONFIG; the webhook pods pick the certificate up within a minute or two"
