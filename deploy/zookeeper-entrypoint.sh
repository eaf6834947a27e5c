#!/bin/sh
# ZooKeeper in a container: writes zoo.cfg from the ZOO_* variables (the names
# the official image reads) and runs the server in the foreground, logging to
# standard error.  A zoo.cfg mounted at $ZOO_CONF_DIR/zoo.cfg is used as is.
set -eu

: "${ZOO_CONF_DIR:=/conf}" "${ZOO_DATA_DIR:=/data}" "${ZOO_DATA_LOG_DIR:=/datalog}"
: "${ZOO_MY_ID:=1}" "${ZOO_PORT:=2181}" "${ZOO_TICK_TIME:=2000}"
: "${ZOO_INIT_LIMIT:=5}" "${ZOO_SYNC_LIMIT:=2}" "${ZOO_MAX_CLIENT_CNXNS:=60}"
: "${ZOO_STANDALONE_ENABLED:=true}" "${ZOO_ADMINSERVER_ENABLED:=false}"
: "${ZOO_AUTOPURGE_PURGEINTERVAL:=0}" "${ZOO_AUTOPURGE_SNAPRETAINCOUNT:=3}"
: "${ZOO_4LW_COMMANDS_WHITELIST:=srvr}" "${ZOO_SERVERS:=}" "${ZOO_CFG_EXTRA:=}"

mkdir -p "$ZOO_CONF_DIR" "$ZOO_DATA_DIR" "$ZOO_DATA_LOG_DIR"
config="$ZOO_CONF_DIR/zoo.cfg"
if [ ! -f "$config" ]; then
    {
        echo "dataDir=$ZOO_DATA_DIR"
        echo "dataLogDir=$ZOO_DATA_LOG_DIR"
        echo "clientPort=$ZOO_PORT"
        echo "tickTime=$ZOO_TICK_TIME"
        echo "initLimit=$ZOO_INIT_LIMIT"
        echo "syncLimit=$ZOO_SYNC_LIMIT"
        echo "maxClientCnxns=$ZOO_MAX_CLIENT_CNXNS"
        echo "standaloneEnabled=$ZOO_STANDALONE_ENABLED"
        echo "admin.enableServer=$ZOO_ADMINSERVER_ENABLED"
        echo "autopurge.purgeInterval=$ZOO_AUTOPURGE_PURGEINTERVAL"
        echo "autopurge.snapRetainCount=$ZOO_AUTOPURGE_SNAPRETAINCOUNT"
        echo "4lw.commands.whitelist=$ZOO_4LW_COMMANDS_WHITELIST"
        # ZOO_SERVERS: "server.1=zk1:2888:3888;2181 server.2=..." for an ensemble
        for server in $ZOO_SERVERS; do echo "$server"; done
        for extra in $ZOO_CFG_EXTRA; do echo "$extra"; done
    } > "$config"
fi
if [ ! -f "$ZOO_DATA_DIR/myid" ]; then
    echo "$ZOO_MY_ID" > "$ZOO_DATA_DIR/myid"
fi

exec java ${JVMFLAGS:-} \
    -cp "$ZOO_CONF_DIR:/usr/share/java/zookeeper.jar:/usr/share/java/slf4j-simple.jar" \
    org.apache.zookeeper.server.quorum.QuorumPeerMain "$config"
