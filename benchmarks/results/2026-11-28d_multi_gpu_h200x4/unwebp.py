# Rebuilds the lego PNGs from the lossless WebP copies carried to the device (identical pixels).
import glob, os, sys
from PIL import Image
src, dst = sys.argv[1], sys.argv[2]
os.makedirs(dst + "/train", exist_ok=True)
for f in glob.glob(src + "/train/*.webp"):
    Image.open(f).save(dst + "/train/" + os.path.basename(f)[:-5] + ".png")
os.system(f"cp {src}/transforms_train.json {dst}/")
