// Package hostfacts gathers a run's facts (runfacts.Facts) on the agent
// host, where the hook publishes the result (kbgen run --publish): the
// agent's name and queue, the node, its GPUs' UUIDs from the placement
// env (`kbgen node install` wrote them), model and driver from the NVIDIA
// kernel module's /proc files, the image the step ran, kbgen's version,
// whether the node's docker has that image (ImagePulled: the
// image_not_prepulled alarm's source), and the noise record's verdict,
// reasons, Xids and clock-event time.
// Nothing comes from the container's result.json.
package hostfacts
