// A minimal TEE-key device plugin in Node.js, written from the kubelet's upstream protos
// (deviceplugin v1beta1, podresources v1) with @grpc/grpc-js: what a plugin author outside Python
// would write to test against `teesim serve`. It reconciles like teesim's own plugin, in a few lines:
// one device per key of misc.capacity; every poll it reads misc.current and asks pod-resources List
// which devices are its pods', and marks (current - own) free devices Unhealthy, so that keys taken
// by Kata or by VMs outside Kubernetes are not offered to VMIs.
//
// Everything it knows about the node comes from the environment `teesim serve` gives it:
// TEESIM_HOST_ROOT, TEESIM_DEVICE_PLUGIN_DIR, TEESIM_KUBELET_SOCKET, TEESIM_POD_RESOURCES_SOCKET and
// TEESIM_RESOURCES ("tdx=devices.kubevirt.io/tdx": misc resource = extended resource name).
'use strict';

const fs = require('fs');
const path = require('path');
const grpc = require('@grpc/grpc-js');
const protoLoader = require('@grpc/proto-loader');

const env = (name) => {
  const value = process.env[name];
  if (!value) {
    console.error(`plugin.js: ${name} is not set; run me under teesim serve --plugin`);
    process.exit(2);
  }
  return value;
};

const PROTOS = process.env.TEESIM_PROTOS || path.join(__dirname, '../../../../simulator/teesim/kubelet/protos');
const load = (file) => grpc.loadPackageDefinition(
  protoLoader.loadSync(path.join(PROTOS, file), { keepCase: true, defaults: true }));
const dp = load('deviceplugin/v1beta1/api.proto').v1beta1;
const pr = load('podresources/v1/api.proto').v1;

const hostRoot = env('TEESIM_HOST_ROOT');
const pluginDir = env('TEESIM_DEVICE_PLUGIN_DIR');
const [misc, resourceName] = env('TEESIM_RESOURCES').split(',')[0].split('=');
const endpoint = `node-${misc}.sock`;
const pollMs = Number(process.env.PLUGIN_POLL_MS || 500);

// misc.capacity / misc.current: "<resource> <value>" lines (kernel/cgroup/misc.c).
function readMisc(file) {
  const text = fs.readFileSync(path.join(hostRoot, 'sys/fs/cgroup', file), 'ascii');
  for (const line of text.split('\n')) {
    const [name, value] = line.trim().split(/\s+/);
    if (name === misc) return Number.parseInt(value, 10);
  }
  return 0;
}

const capacity = readMisc('misc.capacity');
const ids = Array.from({ length: capacity }, (_, i) => `${misc}-${String(i).padStart(3, '0')}`);
let unhealthy = new Set();
const streams = new Set();

function deviceList() {
  return { devices: ids.map((ID) => ({ ID, health: unhealthy.has(ID) ? 'Unhealthy' : 'Healthy' })) };
}

function publish() {
  const message = deviceList();
  for (const call of streams) call.write(message);
}

const server = new grpc.Server();
server.addService(dp.DevicePlugin.service, {
  GetDevicePluginOptions: (call, callback) => callback(null, {}),
  ListAndWatch: (call) => {
    streams.add(call);
    call.on('cancelled', () => streams.delete(call));
    call.write(deviceList());
  },
  GetPreferredAllocation: (call, callback) => callback(null, { container_responses: [] }),
  Allocate: (call, callback) => {
    const container_responses = call.request.container_requests.map((req) => {
      req.devices_ids.forEach((id) => unhealthy.delete(id)); // an allocated device is never Unhealthy
      return { envs: { TEESIM_NODE_PLUGIN_DEVICES: req.devices_ids.join(',') } };
    });
    callback(null, { container_responses });
  },
  PreStartContainer: (call, callback) => callback(null, {}),
});

const podResources = new pr.PodResourcesLister(`unix:${env('TEESIM_POD_RESOURCES_SOCKET')}`,
  grpc.credentials.createInsecure());

function poll() {
  const current = readMisc('misc.current');
  podResources.List({}, { deadline: Date.now() + 2000 }, (err, answer) => {
    if (err) return; // keep the last list; the next poll asks again
    const own = new Set();
    for (const pod of answer.pod_resources) {
      for (const container of pod.containers) {
        for (const dev of container.devices) {
          if (dev.resource_name === resourceName) dev.device_ids.forEach((id) => own.add(id));
        }
      }
    }
    const others = Math.max(current - own.size, 0);
    const free = ids.filter((id) => !own.has(id));
    const next = new Set(free.slice(free.length - Math.min(others, free.length)));
    const changed = next.size !== unhealthy.size || [...next].some((id) => !unhealthy.has(id));
    unhealthy = next;
    if (changed) publish();
  });
}

const socket = path.join(pluginDir, endpoint);
fs.rmSync(socket, { force: true });
server.bindAsync(`unix:${socket}`, grpc.ServerCredentials.createInsecure(), (err) => {
  if (err) {
    console.error(`plugin.js: cannot serve ${socket}: ${err.message}`);
    process.exit(1);
  }
  const registration = new dp.Registration(`unix:${env('TEESIM_KUBELET_SOCKET')}`, grpc.credentials.createInsecure());
  const request = { version: 'v1beta1', endpoint, resource_name: resourceName, options: {} };
  registration.Register(request, { deadline: Date.now() + 15000 }, (regErr) => {
    if (regErr) {
      console.error(`plugin.js: the kubelet refused ${resourceName}: ${regErr.details}`);
      process.exit(1);
    }
    console.log(`plugin.js: registered ${resourceName} with ${ids.length} devices`);
    setInterval(poll, pollMs);
  });
});

process.on('SIGTERM', () => {
  server.forceShutdown();
  process.exit(0);
});
