# A short-lived shell process of the churn benchmark: a few hundred
# builtins, no other process.
i=0
while [ "$i" -lt 300 ]; do
	i=$((i + 1))
done
