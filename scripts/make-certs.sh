#!/usr/bin/env bash
# Makes a cluster CA and one certificate per worker, signed by it, with the
# openssl command: scripts/make-certs.sh DIR NAME...  (DIR/ca.pem,
# DIR/NAME.pem, DIR/NAME.key). For tests and trying TLS out; a real cluster
# uses its own CA. Every certificate is valid for 30 days.
set -euo pipefail
if [ $# -lt 2 ]; then
  echo "usage: $0 DIR NAME..." >&2
  exit 2
fi
dir=$1
shift
mkdir -p "$dir"
cd "$dir"
if [ ! -f ca.pem ]; then
  openssl req -x509 -newkey rsa:2048 -nodes -keyout ca.key -out ca.pem -days 30 \
    -subj "/CN=castor cluster CA" 2>/dev/null
fi
for name in "$@"; do
  openssl req -newkey rsa:2048 -nodes -keyout "$name.key" -out "$name.csr" -subj "/CN=$name" 2>/dev/null
  openssl x509 -req -in "$name.csr" -CA ca.pem -CAkey ca.key -CAcreateserial -out "$name.pem" -days 30 2>/dev/null
  rm -f "$name.csr"
done
chmod 600 ./*.key
echo "made $(pwd)/ca.pem and certificates for: $*"
